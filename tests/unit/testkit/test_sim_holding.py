"""The reorder window in the simulator (testkit/sim/holding.py): half the seeds hold their
deliveries for a drawn window, and finding F40 (a held delivery acknowledged while its hold
was lost with the broker away) is a regression seed."""

from __future__ import annotations

import pytest

from onceonly.processors.reply.late_sends import LateSends
from testkit.sim import holding
from testkit.sim.run import run_schedule
from testkit.sim.schedule import WINDOWS_MS, Reorder, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet", "before_read_cuts")  # as their seeds were found

#: with the window it draws (15 s), its members' holds are lost while writes expire
F40 = 10


def test_about_half_the_seeds_draw_a_window_and_the_command_can_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    windows = [Schedule(seed).window_ms for seed in range(200)]

    assert 70 < sum(1 for w in windows if w) < 130
    assert {w for w in windows if w} == set(WINDOWS_MS)
    monkeypatch.setattr(Reorder, "mode", "off")
    assert Schedule(F40).window_ms == 0
    monkeypatch.setattr(Reorder, "mode", "on")
    assert Schedule(F40).window_ms == 15000


def test_f40_a_hold_the_broker_lost_is_read_again_by_the_restarted_worker(
    monkeypatch: pytest.MonkeyPatch, before_cuts: None
) -> None:
    monkeypatch.setattr(Reorder, "mode", "on")

    result = run_schedule(Schedule(F40))

    assert result.passed, result.report()
    lost = [i for i, e in enumerate(result.events) if "a holds-table write expired" in e]
    assert lost and "exits: BrokerUnavailable" in result.events[lost[0] + 1]
    assert sum("mail sent <m39@sim>" in e for e in result.events) == 1


def test_f40_acknowledged_whatever_became_of_its_hold_a_held_delivery_is_lost(
    monkeypatch: pytest.MonkeyPatch, before_cuts: None
) -> None:
    monkeypatch.setattr(Reorder, "mode", "on")
    monkeypatch.setattr(holding, "IGNORE_LOST_HOLDS", True)  # the world before F40's fix

    result = run_schedule(Schedule(F40))

    unanswered = [str(v) for v in result.violations if v.invariant == "answered_once"]
    assert any("<m39@sim>" in v and "no ledger record" in v for v in unanswered), unanswered


#: drawn: a worker paused 104 s right after an ownership check whose whole-buffer write of
#: a thread landed after the next owner's, which had held and acknowledged m56 and m58
F42 = 1236


def test_f42_a_paused_workers_late_hold_leaves_the_next_owners_held_events() -> None:
    result = run_schedule(Schedule(F42))

    assert result.passed, result.report()
    assert Schedule(F42).window_ms  # drawn: played with its reorder window


#: drawn (window 2 s, approval, keys honoured): b1 passed its fence check for an approved
#: draft's send and froze 20.9 s; a1 took the reply over, its five sends failed (5xx), it
#: found no email in the thread, recorded *failed* and dead-lettered it; b1 then sent. The
#: partition's next owner finds the failed send in its take-over and records it sent
GAVE_UP = 800009077


@pytest.mark.usefixtures("before_read_cuts")
def test_a_stale_send_beside_a_reply_the_next_owner_gave_up_on_is_found_by_the_next_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = run_schedule(Schedule(GAVE_UP))
    monkeypatch.setattr(LateSends, "taken", lambda self, *args, **kwargs: None)
    forgotten = run_schedule(Schedule(GAVE_UP))

    assert found.passed and not found.window_hits, found.report()
    assert forgotten.passed and forgotten.gave_up  # the fence's window, counted apart
    [hit] = forgotten.window_hits
    assert (hit.invariant, hit.detail) == ("ledger_agrees", "an email, recorded failed")
    assert not forgotten.keys_ignored

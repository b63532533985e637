"""The operator's ``onceonly replay`` in the simulator (testkit/sim/replay.py): a range of the
deliveries partition copied with the replay header while the workers run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from onceonly.schemas.envelope import has_valid_mac
from testkit.sim.letters import KEY, Resent, envelope_of
from testkit.sim.replay import replayed
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Replays, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet")

#: its replay copies the partition from offset 0: 11 records, while their events are answered
FROM_THE_START = 19


def test_about_half_the_schedules_replay_and_the_command_can_leave_them_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn = [any(f.kind == "replay" for f in Schedule(s).faults) for s in range(200)]

    assert 70 < sum(drawn) < 130
    monkeypatch.setattr(Replays, "on", False)
    assert not any(f.kind == "replay" for s in range(200) for f in Schedule(s).faults)


def test_a_replay_copies_each_record_from_its_offset_as_a_replay_and_none_is_answered_twice() -> (
    None
):
    result = run_schedule(Schedule(FROM_THE_START))

    assert result.passed, result.report()
    events = result.events
    start = next(i for i, e in enumerate(events) if "replay from offset 0" in e)
    assert "11 records copied" in events[start]
    skipped = [e for e in events[start:] if "resent" in e and "skipped: duplicate" in e]
    assert skipped  # copies of events answered before: the worker's dedupe skips them


def test_a_replayed_webhook_carries_its_envelope_and_mac_and_the_replay_mark() -> None:
    world = SimpleNamespace(letters=SimpleNamespace(envelope=envelope_of))
    message = Schedule(FROM_THE_START).messages[0]

    copy = replayed(world, message)  # type: ignore[arg-type]

    assert isinstance(copy, Resent) and copy.replay
    assert copy.resend.envelope.event_id == message.event_id
    assert has_valid_mac(copy.resend.value, copy.resend.headers(), KEY)
    assert replayed(world, copy) == copy  # type: ignore[arg-type]

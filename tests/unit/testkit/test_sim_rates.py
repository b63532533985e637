"""The group's rate world (testkit/sim/rates.py): several partitions, a changing group, the
real flow control on virtual time; replayable, and it can fail."""

from __future__ import annotations

import pytest

from testkit.invariants import most_in_window
from testkit.sim.__main__ import main
from testkit.sim.rates import RateSchedule, run_rates

pytestmark = pytest.mark.usefixtures("sim_quiet")


def test_a_rate_schedule_has_fifty_messages_five_faults_and_a_group_over_partitions() -> None:
    for seed in range(50):
        schedule = RateSchedule(seed)
        assert len(schedule.arrivals) >= 50 and len(schedule.faults) >= 5
        assert schedule.partitions >= 2 and schedule.members >= 2


def test_the_same_rate_seed_gives_the_same_trace() -> None:
    first, again = run_rates(RateSchedule(7)), run_rates(RateSchedule(7))
    assert first.events == again.events and len(first.events) > 100


def test_a_clean_range_of_rate_seeds_passes() -> None:
    failed = [r.report() for r in map(run_rates, map(RateSchedule, range(150))) if not r.passed]
    assert failed == []


@pytest.mark.parametrize(
    "seed",
    # what each found before its part of the fix (docs/simulation.md, finding F18):
    # 0, a worker's first call on a share risen from zero not waiting an interval; 2,
    # shares paced as fractions of a call; 23, a drained worker's calls on its revoked share
    [0, 2, 23],
)
def test_a_seed_that_found_the_group_over_its_rate_passes(seed: int) -> None:
    result = run_rates(RateSchedule(seed))
    assert result.passed, result.report()


def test_the_group_rate_checked_per_worker_is_caught_within_ten_seeds() -> None:
    for seed in range(10):
        result = run_rates(RateSchedule(seed, per_worker=True))
        if any(v.invariant == "within_rate" for v in result.verdict.violations):
            assert run_rates(RateSchedule(seed)).passed  # the bug's, not the seed's
            return
    pytest.fail("a per-worker rate was not caught in 10 seeds")


def test_only_a_frozen_workers_calls_take_the_group_over_its_rate_in_the_named_window() -> None:
    result = run_rates(RateSchedule(28))  # a worker paused past its session, admitted calls
    assert result.window_hit and result.passed
    starts = [at for at, _, what in result.events if what.startswith("call started")]
    assert most_in_window(starts, 60.0) > RateSchedule(28).rpm  # the model saw one too many


def test_the_command_runs_the_rate_world(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rates", "--seeds", "6", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "the rate world: seeds 0 to 5" in out and "0 with violations" in out


def test_the_command_plants_the_per_worker_rate_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--bug", "group-rate-per-worker", "--seeds", "10", "--jobs", "2"]) == 1
    assert "within_rate: the group" in capsys.readouterr().out

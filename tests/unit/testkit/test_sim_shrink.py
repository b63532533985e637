"""Shrinking a failing schedule: a smaller sub-schedule of the seed's that fails the same way,
and a spec that replays it (testkit/sim/shrink.py, issue 43 item 4)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import count

import pytest

from testkit.sim.__main__ import main, quieted
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Bugs, Reorder, Replays, Schedule
from testkit.sim.shrink import (
    NothingToShrink,
    Shrunk,
    failures,
    from_spec,
    parse_spec,
    shrink,
    size,
    spec_of,
)

#: a planted bug that fails most seeds (not those whose lost webhooks a catch-up answers, with
#: the work it lost); seed 13 shrinks in a few seconds
BUGS = Bugs(commit_before_done=True)
FIRST = 13
#: a seed this bug fails by two invariants: answered_once first, and ledger_agrees
TWO_WAYS = 13


pytestmark = pytest.mark.usefixtures("sim_quiet", "as_found")


@pytest.fixture(scope="module")
def shrunk() -> Iterator[Shrunk]:
    with quieted(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(Reorder, "mode", "off")  # as the seeds were chosen (as_found)
        patch.setattr(Replays, "on", False)
        seed = next(s for s in count(FIRST) if not run_schedule(Schedule(s, BUGS)).passed)
        yield shrink(Schedule(seed, BUGS))


def test_a_spec_names_the_seed_and_what_was_dropped_and_round_trips() -> None:
    schedule = Schedule(
        85, drop_faults=frozenset({0, 1, 2, 5}), drop_messages=frozenset({*range(12), 13})
    )

    spec = spec_of(schedule)

    assert spec == "85:-f0..2,-f5,-m0..11,-m13"
    assert parse_spec(spec) == (85, schedule.drop_faults, schedule.drop_messages)
    assert from_spec(spec) == schedule
    assert spec_of(from_spec("85")) == "85" and from_spec("85") == Schedule(85)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("eighty", "not a seed"),
        ("85:-x3", "not -fN, -mN"),
        ("85:m3", "not -fN, -mN"),
        ("85:-m999", "not m999"),
        ("85:-f99", "not f99"),
    ],
)
def test_a_bad_spec_is_refused_with_what_is_wrong(spec: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        from_spec(spec)


@pytest.mark.parametrize("seed", [85, 202])
def test_a_sub_schedule_keeps_the_others_as_the_seed_drew_them(seed: int) -> None:
    full = Schedule(seed, require_approval=True)  # decide events among the faults
    faults, messages = frozenset({0, 3, len(full.faults) - 1}), frozenset({0, 5, 6})

    sub = Schedule(seed, require_approval=True, drop_faults=faults, drop_messages=messages)

    keep = [i for i in range(len(full.messages)) if i not in messages]
    assert sub.messages == tuple(full.messages[i] for i in keep)
    assert sub.arrivals == tuple(full.arrivals[i] for i in keep)
    assert sub.faults == tuple(f for i, f in enumerate(full.faults) if i not in faults)
    assert (sub.ignore_keys, sub.approval) == (full.ignore_keys, full.approval)


def test_a_shrunk_schedule_is_smaller_and_fails_the_same_way(shrunk: Shrunk) -> None:
    original, small = shrunk.original, shrunk.schedule

    assert size(small) < size(original)
    assert shrunk.minimal and 1 < shrunk.runs <= 300
    assert shrunk.invariant == failures(run_schedule(original))[0]
    assert shrunk.invariant in failures(shrunk.result)
    assert set(small.messages) < set(original.messages)
    assert set(small.faults) <= set(original.faults)


def test_replaying_a_shrunk_spec_fails_as_the_shrink_saw(shrunk: Shrunk) -> None:
    replayed = run_schedule(from_spec(shrunk.spec, BUGS))

    assert shrunk.invariant in failures(replayed)
    assert replayed.events == shrunk.result.events


def test_no_single_fault_or_message_of_a_shrunk_schedule_can_go(shrunk: Shrunk) -> None:
    small = shrunk.schedule
    full = Schedule(small.seed, BUGS)
    faults = [i for i in range(len(full.faults)) if i not in small.drop_faults]
    messages = [i for i in range(len(full.messages)) if i not in small.drop_messages]
    removals: list[tuple[frozenset[int], frozenset[int]]] = [
        (frozenset({i}), frozenset()) for i in faults
    ]
    removals += [(frozenset(), frozenset({i})) for i in messages]
    for drop_f, drop_m in removals:
        less = Schedule(
            small.seed,
            BUGS,
            drop_faults=small.drop_faults | drop_f,
            drop_messages=small.drop_messages | drop_m,
        )
        failed = failures(run_schedule(less))
        assert shrunk.invariant not in failed, f"{spec_of(less)} still fails: {failed}"


def test_a_shrink_is_deterministic_keeps_the_failure_asked_and_its_run_budget() -> None:
    original = Schedule(TWO_WAYS, BUGS)
    assert failures(run_schedule(original)) == ["answered_once", "ledger_agrees"]

    first = shrink(original, max_runs=10, invariant="ledger_agrees")
    again = shrink(original, max_runs=10, invariant="ledger_agrees")

    assert first.spec == again.spec and first.runs == 10 and not first.minimal
    assert size(first.schedule) < size(original)
    assert "ledger_agrees" in failures(first.result)
    assert "ledger_agrees" in failures(run_schedule(from_spec(first.spec, BUGS)))


def test_a_passing_seed_or_another_failure_is_refused() -> None:
    with pytest.raises(NothingToShrink, match="passes: there is no failure to shrink"):
        shrink(Schedule(0))
    with pytest.raises(NothingToShrink, match="not never_doubled"):
        shrink(Schedule(TWO_WAYS, BUGS), invariant="never_doubled")


def test_the_command_shrinks_a_seed_and_replays_its_spec(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bug = ["--bug", "commit-before-done", "--window", "off", "--no-replays"]
    assert main(["--seed", str(FIRST), "--shrink", "--max-runs", "6", *bug]) == 1
    out = capsys.readouterr().out
    flags = "--bug commit-before-done --window off --no-replays"
    replay = rf"replay: python -m testkit.sim --only (\S+) {flags}"
    found = re.search(replay, out)
    assert found, out
    assert f"seed {FIRST} fails by answered_once; shrunk in 6 runs" in out

    assert main(["--only", found.group(1), *bug]) == 1
    assert "answered_once" in capsys.readouterr().out

    assert main(["--seed", "0", "--shrink", "--window", "off", "--no-replays"]) == 2
    assert "not shrunk: schedule 0 passes" in capsys.readouterr().out


def test_a_range_with_a_failing_seed_prints_the_command_that_shrinks_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bug = ["--bug", "commit-before-done", "--window", "off", "--no-replays"]
    assert main(["--seeds", "1", "--start", str(FIRST), *bug]) == 1

    out = capsys.readouterr().out
    flags = "--bug commit-before-done --window off --no-replays"
    shrink = f"python -m testkit.sim --seed {FIRST} --shrink {flags}"
    assert shrink in out

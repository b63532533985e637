"""Stalled partitions: an idle partition is never reported, however long it idles; records
that wait with no progress past the threshold are reported once, until the partition moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from onceonly.processors.stalls import (
    Change,
    PartitionWatch,
    Position,
    StallWatch,
    watch_partition,
)

THRESHOLD = 60.0
ROUND = 7.0  # faust's livelock detector: 2.5 commit intervals of 2.8 s


def run(looks: list[tuple[float, int, int]]) -> list[Change]:
    """The changes of a sequence of (time, commit point, log end) looks at one partition."""
    watch: PartitionWatch | None = None
    changes = []
    for now, done, end in looks:
        watch, change = watch_partition(watch, done, end, now, THRESHOLD)
        changes.append(change)
    return changes


def test_an_idle_partition_is_never_reported_however_long_it_idles() -> None:
    day = [(t * ROUND, 12, 12) for t in range(int(86_400 / ROUND))]

    assert set(run(day)) == {Change.NONE}


def test_records_waiting_with_no_progress_are_reported_once_past_the_threshold() -> None:
    looks = [(t * ROUND, 12, 15) for t in range(100)]  # three records wait, for 700 s

    changes = run(looks)

    assert changes.count(Change.STALLED) == 1
    reported_at = looks[changes.index(Change.STALLED)][0]
    assert THRESHOLD <= reported_at < THRESHOLD + ROUND
    assert Change.MOVING not in changes


def test_a_partition_that_progresses_within_the_threshold_is_never_reported() -> None:
    # records always wait (a backlog), but the oldest finishes every 50 s
    looks = [(t * ROUND, int(t * ROUND // 50), 1000) for t in range(500)]

    assert set(run(looks)) == {Change.NONE}


def test_the_stall_clock_starts_when_records_begin_to_wait_not_at_the_last_progress() -> None:
    idle = [(t * ROUND, 5, 5) for t in range(1000)]  # nothing moves for two hours: idle
    arrived = idle[-1][0] + ROUND
    waiting = [(arrived + t * ROUND, 5, 6) for t in range(20)]

    changes = run(idle + waiting)[len(idle) :]

    reported_at = waiting[changes.index(Change.STALLED)][0]
    assert reported_at - arrived >= THRESHOLD - ROUND  # not at once, after the idle hours


def test_a_reported_stall_that_moves_again_says_so_once_and_can_stall_again() -> None:
    stuck = [(t * ROUND, 3, 9) for t in range(20)]
    moving = [(stuck[-1][0] + ROUND, 4, 9), (stuck[-1][0] + 2 * ROUND, 5, 9)]
    stuck_again = [(moving[-1][0] + (t + 1) * ROUND, 5, 9) for t in range(20)]

    changes = run(stuck + moving + stuck_again)

    assert [c for c in changes if c is not Change.NONE] == [
        Change.STALLED,
        Change.MOVING,
        Change.STALLED,
    ]


def test_a_stall_that_empties_the_partition_is_over() -> None:
    # the records waiting were taken and finished between two looks: the point moved
    # (or, read from elsewhere, nothing waits any more)
    looks = [(t * ROUND, 3, 9) for t in range(20)] + [(20 * ROUND, 3, 3)]

    changes = run(looks)

    assert changes[-1] is Change.MOVING


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.1, max_value=30.0),  # seconds to the next look
            st.integers(min_value=0, max_value=2),  # how far the commit point moves
            st.integers(min_value=0, max_value=3),  # records that arrive
        ),
        max_size=200,
    )
)
def test_a_stall_is_reported_once_exactly_when_records_have_waited_unmoved_past_the_threshold(
    steps: list[tuple[float, int, int]],
) -> None:
    now, done, end = 0.0, 0, 0
    looks: list[tuple[float, int, int]] = []
    watch: PartitionWatch | None = None
    reported = False
    for pause, moved, arrived in steps:
        now, end = now + pause, end + arrived
        done = min(done + moved, end)
        looks.append((now, done, end))
        watch, change = watch_partition(watch, done, end, now, THRESHOLD)
        # the last look at which the partition was fine: the first, a progress, or nothing
        # waiting; every look since has had records waiting behind the same commit point
        fine = max(
            i for i, (_, d, e) in enumerate(looks) if i == 0 or d != looks[i - 1][1] or d >= e
        )
        stuck_for = now - looks[fine][0] if fine < len(looks) - 1 else 0.0
        if change is Change.MOVING:
            assert reported and stuck_for == 0.0
            reported = False
        elif change is Change.STALLED:
            assert not reported and stuck_for >= THRESHOLD
            reported = True
        else:  # nothing said: nothing to say, or said already
            assert reported or stuck_for < THRESHOLD
            assert not reported or stuck_for > 0.0


def test_the_watch_logs_a_stall_once_in_its_own_words_and_counts_it() -> None:
    stalled: list[int] = []
    rounds: list[None] = []
    watch = StallWatch(THRESHOLD, on_round=lambda: rounds.append(None), on_stalled=stalled.append)
    stuck = Position("onceonly.deliveries", 2, done=40, end=45)
    idle = Position("onceonly.deliveries", 3, done=7, end=7)

    with capture_logs() as logs:
        for t in range(30):
            watch.observe([stuck, idle], t * ROUND)

    assert [e for e in logs if e["log_level"] != "info"] == [
        {
            "event": "partition stalled: the record at its commit point has not finished",
            "log_level": "warning",
            "topic": "onceonly.deliveries",
            "partition": 2,
            "waiting": 5,
            "offset": 40,
            "stalled_s": 63,
            "hint": logs[0]["hint"],
        }
    ]
    assert "ONCEONLY_STALL_WARN_S" in logs[0]["hint"]
    assert len(rounds) == 30
    assert stalled[-1] == 1 and stalled[0] == 0

    with capture_logs() as logs:
        watch.observe([Position("onceonly.deliveries", 2, done=45, end=45), idle], 30 * ROUND)

    assert [(e["event"], e["partition"]) for e in logs] == [("partition moving again", 2)]
    assert stalled[-1] == 0


def test_a_partition_that_leaves_the_worker_takes_its_stall_with_it() -> None:
    stalled: list[int] = []
    watch = StallWatch(THRESHOLD, on_stalled=stalled.append)
    stuck = Position("onceonly.deliveries", 2, done=40, end=45)
    for t in range(20):
        watch.observe([stuck], t * ROUND)
    assert watch.stalled == 1

    watch.forget([("onceonly.deliveries", 2)])

    assert watch.stalled == 0 and stalled[-1] == 0
    with capture_logs() as logs:  # back after a rebalance: watched afresh, not "moving"
        watch.observe([stuck], 20 * ROUND)
    assert logs == []

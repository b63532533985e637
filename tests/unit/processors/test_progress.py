"""The worker's one recovery line: partitions per changelog and the records they hold."""

from __future__ import annotations

from onceonly.processors.runtime.progress import (
    ChangelogPartition,
    partition_counts,
    recovery_counts,
)

EVENTS0, EVENTS1 = ChangelogPartition("events", 0), ChangelogPartition("events", 1)
HOLDS0 = ChangelogPartition("holds", 0)


def test_partitions_are_counted_per_topic() -> None:
    assert partition_counts([EVENTS0, EVENTS1, HOLDS0]) == {"events": 2, "holds": 1}


def test_a_partition_holds_its_highwater_plus_one_records() -> None:
    counts = recovery_counts([EVENTS0, EVENTS1], [], {EVENTS0: 9, EVENTS1: 0})

    assert counts["changelog_records"] == 11


def test_an_empty_changelog_partition_holds_no_records() -> None:
    counts = recovery_counts([EVENTS0], [], {EVENTS0: -1})

    assert counts["changelog_records"] == 0


def test_standby_partitions_are_counted_apart() -> None:
    counts = recovery_counts([EVENTS0], [HOLDS0], {})

    assert (counts["active_partitions"], counts["standby_partitions"]) == (1, 1)

"""Stalled partitions: records waiting on a deliveries partition whose work does not move.

faust's own check (its consumer's livelock detector) logs fifteen lines per partition every
7 s once a partition it reads looks inactive for five minutes, healthy or not; the worker
replaces it with this one (:mod:`onceonly.processors.runtime.consumer` calls
:meth:`StallWatch.observe` where faust ran its check). A partition *stalls* when records
wait on it (its log end is past its commit point: the oldest record not finished, or
where it was read from) and its commit point has not moved for ``threshold_s``
(``ONCEONLY_STALL_WARN_S``). A stall is logged once, as a warning naming the topic, the
partition, the records waiting and the offset that does not move; a partition that moves
again is logged once at INFO and watched afresh. An idle partition (nothing waiting) never
stalls, however long it idles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

import structlog

log = structlog.get_logger("onceonly.worker")


@dataclass(frozen=True, slots=True)
class PartitionWatch:
    """What the check knows of one partition."""

    #: its commit point when last seen
    done: int
    #: since when (monotonic seconds) that commit point has held with records waiting
    since: float
    #: whether this stall is logged already
    reported: bool = False


class Change(Enum):
    """What one look at a partition says."""

    NONE = "none"
    STALLED = "stalled"  #: records have waited past the threshold with no progress
    MOVING = "moving"  #: a reported stall is over


def watch_partition(
    previous: PartitionWatch | None, done: int, end: int, now: float, threshold_s: float
) -> tuple[PartitionWatch, Change]:
    """One look at a partition whose commit point is ``done`` and whose log ends at ``end``
    (the offset the next record will get): its watch from now on, and what changed.

    The clock starts again at every progress and while nothing waits, so a stall is
    reported once ``threshold_s`` of waiting records and an unmoving commit point have
    passed, and only once until the partition moves or empties.
    """
    waiting = end > done
    if previous is None or done != previous.done or not waiting:
        over = previous is not None and previous.reported
        return PartitionWatch(done, now), Change.MOVING if over else Change.NONE
    if not previous.reported and now - previous.since >= threshold_s:
        return PartitionWatch(done, previous.since, reported=True), Change.STALLED
    return previous, Change.NONE


@dataclass(frozen=True, slots=True)
class Position:
    """Where a watched partition stands: its commit point and its log end."""

    topic: str
    partition: int
    done: int
    end: int


class StallWatch:
    """The worker's watches, one per assigned deliveries partition.

    ``on_round`` is called after every look at the partitions, ``on_stalled`` with the
    number of partitions stalled now (for the metrics).
    """

    def __init__(
        self,
        threshold_s: float,
        *,
        on_round: Callable[[], object] = lambda: None,
        on_stalled: Callable[[int], object] = lambda count: None,
    ) -> None:
        self.threshold_s = threshold_s
        self._on_round = on_round
        self._on_stalled = on_stalled
        self._watches: dict[tuple[str, int], PartitionWatch] = {}

    def observe(self, positions: Iterable[Position], now: float) -> list[Change]:
        """Look at every partition of ``positions``; log what changed, and return it."""
        changes = []
        for position in positions:
            key = (position.topic, position.partition)
            watch, change = watch_partition(
                self._watches.get(key), position.done, position.end, now, self.threshold_s
            )
            self._watches[key] = watch
            if change is not Change.NONE:
                _log_change(change, position, now - watch.since)
            changes.append(change)
        self._on_stalled(self.stalled)
        self._on_round()
        return changes

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        """These (topic, partition) pairs left the worker, or are read again from their
        committed offsets: a stall they had is no longer this worker's to report."""
        for topic, partition in partitions:
            self._watches.pop((topic, partition), None)
        self._on_stalled(self.stalled)

    @property
    def stalled(self) -> int:
        return sum(watch.reported for watch in self._watches.values())


def _log_change(change: Change, position: Position, held_s: float) -> None:
    if change is Change.STALLED:
        log.warning(
            "partition stalled: the record at its commit point has not finished",
            topic=position.topic,
            partition=position.partition,
            waiting=position.end - position.done,
            offset=position.done,
            stalled_s=round(held_s),
            hint=(
                "a reply writer or a send that does not return, or a consumer that stopped "
                "taking records; the record at this offset is read again by the next owner "
                "if the worker stops. Reported once; ONCEONLY_STALL_WARN_S sets the threshold"
            ),
        )
    else:
        log.info(
            "partition moving again",
            topic=position.topic,
            partition=position.partition,
            offset=position.done,
        )

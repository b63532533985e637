"""Which offset of a partition may be committed: the one that follows the finished work.

faust commits by its own reference counts, which do not follow onceonly's work:
``Stream.take_events`` acknowledges every record of a batch when the loop asks for the
next batch, whether the stream is ``noack()`` or not, and its ``_new_offset`` commits past
a gap at the head of the acknowledged list (committed 10, 10 still running, 11 and 12
acknowledged: it commits 13). Either way a record whose model call outlives a commit is
skipped for good by a crash.

So the worker keeps its own book, as Confluent's parallel consumer does: every record
handed to the pipeline is *taken*; a record is *finished* when its work is done or it is
durably in the holds table; a partition's commit point is its lowest taken record not
finished, or one past the highest taken when all are. A record that is never finished
(dropped by a drain) holds its partition's commit point until the next assignment, when
the book starts again from the committed offsets. Nothing here knows faust: the consumer
(:mod:`onceonly.processors.runtime.consumer`) asks this book instead of its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionOffsets:
    """One partition's taken and unfinished offsets."""

    #: offset -> the token of the record that took it (a re-read of the offset replaces it)
    _open: dict[int, object] = field(default_factory=dict)
    #: the open offsets, a min-heap; finished ones are dropped lazily
    _heap: list[int] = field(default_factory=list)
    #: one past the highest offset taken; None until one is taken
    _next: int | None = None
    #: the lowest offset taken since the book started again (the committed offset then)
    first: int | None = None

    def take(self, offset: int, token: object) -> None:
        """A record at ``offset`` was handed to the pipeline (in partition order, or again
        after a seek back: then it is open again until this copy finishes)."""
        if offset not in self._open:
            heapq.heappush(self._heap, offset)
        self._open[offset] = token
        if self._next is None or offset >= self._next:
            self._next = offset + 1
        if self.first is None or offset < self.first:
            self.first = offset

    def finish(self, offset: int, token: object) -> bool:
        """The record's work is done; False (and nothing changes) when ``token`` is not the
        copy that holds the offset now: a stale copy's end never frees a newer one."""
        if self._open.get(offset) is not token:
            return False
        del self._open[offset]
        return True

    def committable(self) -> int | None:
        """The offset to commit (the next one to read after a crash), or None if none taken."""
        heap = self._heap
        while heap and heap[0] not in self._open:
            heapq.heappop(heap)
        return heap[0] if heap else self._next

    @property
    def in_flight(self) -> int:
        return len(self._open)


@dataclass
class OffsetBook:
    """Every assigned partition's :class:`PartitionOffsets`, keyed by topic partition."""

    _parts: dict[Any, PartitionOffsets] = field(default_factory=dict)

    def take(self, tp: Any, offset: int, token: object) -> None:
        self._parts.setdefault(tp, PartitionOffsets()).take(offset, token)

    def finish(self, tp: Any, offset: int, token: object) -> bool:
        part = self._parts.get(tp)
        return part is not None and part.finish(offset, token)

    def committable(self, tp: Any) -> int | None:
        part = self._parts.get(tp)
        return part.committable() if part is not None else None

    def first(self, tp: Any) -> int | None:
        """The lowest offset taken of ``tp`` since it was assigned (its committed offset
        then: every record before it was committed before); None if none was taken."""
        part = self._parts.get(tp)
        return part.first if part is not None else None

    def partitions(self) -> Iterator[Any]:
        return iter(list(self._parts))

    def forget(self, tps: Iterable[Any]) -> None:
        """These partitions were revoked, or are read again from their committed offsets:
        their work so far counts for nothing (what was running is dropped or stale)."""
        for tp in tps:
            self._parts.pop(tp, None)

    @property
    def in_flight(self) -> int:
        return sum(part.in_flight for part in self._parts.values())

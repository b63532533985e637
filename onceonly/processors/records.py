"""What the stream runtime (:mod:`onceonly.processors.runtime`, the one seam over faust)
hands the rest of the worker: records read, tables kept, topics written; typed here so
that nothing else needs to know faust's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


def _nothing() -> None:
    return None


@dataclass(frozen=True, eq=False)
class Record:
    """One record of the deliveries topic, as the runtime read it.

    ``enter()`` makes it the record the calling task works for: the tables write to its
    partition and the fence checks that partition (the runtime's doing). ``handle`` is
    the runtime's own object for the record (acknowledged through the lanes' ``ack``);
    nothing outside the runtime looks inside it.
    """

    value: bytes
    #: as read, in order: a header given twice stays twice (a MAC check counts them)
    headers: tuple[tuple[str, bytes | None], ...]
    partition: int
    offset: int
    handle: Any = None
    _enter: Callable[[], None] = field(default=_nothing, repr=False)

    def enter(self) -> None:
        self._enter()


class KeyValues(Protocol):
    """What a table is to the decisions that read and write it (a dict in their tests)."""

    def get(self, key: bytes) -> bytes | None: ...
    def __setitem__(self, key: bytes, value: bytes) -> None: ...
    def items(self) -> Any: ...


class Table(KeyValues, Protocol):
    """A changelog-backed table of the worker's partitions: bytes to bytes.

    Writes go to the store of the current record's partition (see :meth:`Record.enter`),
    then to the changelog, as faust sends them; ``write_through`` goes the other way
    (changelog first, acknowledged, then the store) for what must never run ahead of
    its topic (the reply ledger)."""

    def __delitem__(self, key: bytes) -> None: ...
    def values(self) -> Iterator[bytes]: ...
    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """The entries of ``partition``'s own store in key order, after ``after``."""
        ...

    async def write_through(
        self, key: bytes, value: bytes, partition: int | None = None
    ) -> tuple[int, int]:
        """Write ``key`` to the changelog, then the store; returns where the record landed
        in the changelog (partition, offset). ``partition``: that one, not the current
        record's (a timer's write, outside any record)."""
        ...

    async def delete_through(self, key: bytes, partition: int) -> tuple[int, int]:
        """Write ``key``'s tombstone to ``partition`` of the changelog, then delete it from
        the store; returns where the tombstone landed (partition, offset)."""
        ...

    def partition_of(self, key: bytes) -> int:
        """The changelog partition a write of ``key`` goes to now."""
        ...

    def applied_offset(self, partition: int) -> int:
        """The offset of the last changelog record in ``partition``'s store; -1 for none."""
        ...


def applied_after_write(applied: int | None, landed: int) -> int | None:
    """A store's applied changelog offset once its own write has landed at ``landed``:
    ``landed`` when the store held every record before it (``applied`` is the offset just
    below), else ``applied`` unchanged (None: nothing applied).

    The offset is where the store's next recovery starts. faust moves it to every own
    write's offset when the broker acknowledges it; a worker paused past its session
    whose write is acknowledged after the next owner's records (which its store never
    read) would start its next recovery after them, and answer their messages again
    (the simulator's finding F3). Kept where it is, the next recovery reads them; an own
    record read again is applied again, in log order.
    """
    before = -1 if applied is None else applied
    return landed if landed == before + 1 else applied


@dataclass
class SweepPasses:
    """Each partition's sweep passes, a slice per record the partition receives (the dedupe
    sweep's and the ledger's): when its last pass began, and where the pass under way goes
    on from."""

    began: dict[int, float] = field(default_factory=dict)
    #: partition -> the last key the pass under way has read (None: from the start)
    going_on: dict[int, bytes | None] = field(default_factory=dict)

    def next_slice(self, partition: int, now: float, every_s: float) -> tuple[bool, bytes | None]:
        """Whether a slice of ``partition`` is due now, and the key it reads after. A pass
        begins every ``every_s``, the first a whole interval after the partition was first
        seen (a start, a rebalance)."""
        if partition not in self.going_on:
            if now - self.began.setdefault(partition, now) < every_s:
                return False, None
            self.began[partition] = now
            self.going_on[partition] = None
        return True, self.going_on.pop(partition)

    def slice_read(self, partition: int, last: bytes | None) -> None:
        """The slice read up to ``last`` (None: the pass is done)."""
        if last is not None:
            self.going_on[partition] = last


def own_slice(
    table: Table, partition: int, after: bytes | None, size: int
) -> list[tuple[bytes, bytes]]:
    """Up to ``size`` entries of ``partition``'s own store, in key order after ``after``."""
    out: list[tuple[bytes, bytes]] = []
    for entry in table.own_entries(partition, after):
        out.append(entry)
        if len(out) >= size:
            break
    return out


class Topic(Protocol):
    """A topic the worker produces to (its records acknowledged by the broker)."""

    async def send(
        self,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        partition: int | None = None,
        headers: Mapping[str, bytes] | None = None,
    ) -> Any: ...

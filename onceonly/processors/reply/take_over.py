"""Which ledger partitions this worker has read by a take-over since they were assigned.

A take-over (:meth:`~onceonly.processors.reply.ledger.TableLedger.take_over`) reads a
partition's records of the last compaction lag and writes again the record before a
key's late last word, one its last owner did not live to repair (the simulator's finding
F29). It must come before this worker sends a *pending* record it recovered, not wrote:
that record may itself be the late one, landed by a writer past its fence check after
the last owner's newer record, which the owner stopped before it could repair (F38). So
each partition is taken over once per assignment, by whichever asks first: a lane's
first work on it, a decision, the send of a recovered record, or the timer's audit. One
take-over at a time: each holds a partition's last compaction lag in memory (about 200 MB
at 1,000 replies/s; docs/benchmarks.md), and a worker given many partitions at once
would hold them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from onceonly.processors.exceptions import Rebalancing

#: a partition's take-over range: the offset of its first record that landed within the
#: last compaction lag (by the broker's timestamps), and its log-end offset
Tail = Callable[[int], Awaitable[tuple[int, int]]]
#: reads ``partition`` from ``first`` to ``end`` (excluded) and repairs what it finds
Take = Callable[[int, int, int], Awaitable[object]]


class TakeOvers:
    """The partitions taken over since the partitions last changed (:meth:`forget`)."""

    def __init__(self, tail: Tail | None, take: Take) -> None:
        #: None: no take-over (a ledger with no topic to read, as in unit tests)
        self.tail = tail
        self.take = take
        self._taken: set[int] = set()
        self._era = 0  # moved on by each forget(): a take-over begun before it counts not
        self._one = asyncio.Lock()  # one take-over at a time, whatever the partition

    def forget(self) -> None:
        """The partitions changed: each is taken over again before what it holds is acted on."""
        self._era += 1
        self._taken.clear()

    def taken(self, partition: int) -> bool:
        return self.tail is None or partition in self._taken

    async def once(self, partition: int) -> None:
        """Take ``partition`` over unless it was since the last change; a second asker
        waits for the first's, and each for the take-over under way of another partition.
        :class:`Rebalancing` if the partitions changed while it waited (the partition may
        not be this worker's any more: the asker stands down)."""
        if self.taken(partition) or self.tail is None:
            return
        era = self._era
        async with self._one:
            if partition in self._taken:
                return
            if era != self._era:
                moved = f"the partitions changed before partition {partition}'s take-over"
                raise Rebalancing(moved)
            first, end = await self.tail(partition)
            await self.take(partition, first, end)
            if era == self._era:
                self._taken.add(partition)

"""A reply ledger in memory, for reply-once tests without a broker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from onceonly.processors.reply.arbitration import Ruling, Verdict
from onceonly.processors.reply.take_over import TakeOvers
from onceonly.schemas.ledger import ReplyRecord


@dataclass
class MemoryLedger:
    """``get`` and ``put`` as the worker's ledger has them; ``writes`` in the order made."""

    records: dict[str, ReplyRecord] = field(default_factory=dict)
    writes: list[ReplyRecord] = field(default_factory=list)
    #: no topic to read: nothing to take over
    take_overs: TakeOvers = field(default_factory=lambda: TakeOvers(None, _nothing))

    def get(self, key: str) -> ReplyRecord | None:
        return self.records.get(key)

    @property
    def table(self) -> MemoryLedger:
        """Its own store, as the worker's ledger's ``table``: :meth:`values` encoded."""
        return self

    def values(self) -> Iterator[bytes]:
        """The records' values, as the store's table gives them (a burst's unread thread)."""
        return (record.encode() for record in self.records.values())

    async def put(self, record: ReplyRecord) -> None:
        self.records[record.key] = record
        self.writes.append(record)

    async def put_found(self, record: ReplyRecord, partition: int) -> None:
        """As ``put``: one partition here."""
        await self.put(record)

    async def arbitrate(self, record: ReplyRecord) -> Verdict:
        """One writer, one log: its own record is always its key's first."""
        return Verdict(Ruling.OWN, record)

    async def taken_over(self, key: str) -> None:
        """No other writer: nothing to take over."""

    def forget(self) -> None:
        """Nothing is accounted for by partition here."""


async def _nothing(partition: int, first: int, end: int) -> None:
    """A take-over with nothing to read."""

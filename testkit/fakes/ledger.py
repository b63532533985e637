"""A reply ledger in memory, for reply-once tests without a broker."""

from __future__ import annotations

from dataclasses import dataclass, field

from onceonly.processors.reply.arbitration import Ruling, Verdict
from onceonly.schemas.ledger import ReplyRecord


@dataclass
class MemoryLedger:
    """``get`` and ``put`` as the worker's ledger has them; ``writes`` in the order made."""

    records: dict[str, ReplyRecord] = field(default_factory=dict)
    writes: list[ReplyRecord] = field(default_factory=list)

    def get(self, key: str) -> ReplyRecord | None:
        return self.records.get(key)

    async def put(self, record: ReplyRecord) -> None:
        self.records[record.key] = record
        self.writes.append(record)

    async def arbitrate(self, record: ReplyRecord) -> Verdict:
        """One writer, one log: its own record is always its key's first."""
        return Verdict(Ruling.OWN, record)

    def forget(self) -> None:
        """Nothing is accounted for by partition here."""

"""The reply ledger over the worker's ``replies`` table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from onceonly.processors.records import Table
from onceonly.processors.reply.arbitration import PartitionLog, Ruling, Verdict, arbitrate
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.reply")

#: reads (offset, key, value) of the ledger topic's records: partition, first, last (included)
ReadLog = Callable[[int, int, int], Awaitable[Sequence[tuple[int, bytes, bytes | None]]]]


class TableLedger:
    """The reply ledger over the ``replies`` table, whose changelog *is* the ledger topic.

    ``put`` writes the topic first and the worker's own store only once the broker has
    acknowledged the record. faust's table writes go the other way (store, then changelog,
    sent later): a SIGKILL in between left the store saying *sent* while the topic, which
    catch-up and any other owner of the partition read, said *pending* for good (46 of
    8,000 keys after four kills in a scratch run; the chaos runs' one pending key). In this
    order a crash can only leave the store behind the topic: the next owner sends again
    with the same key, which the mail API answers from its idempotency record.
    """

    def __init__(
        self,
        table: Table,
        fence: Callable[[str], Awaitable[Any]] | None = None,
        read_log: ReadLog | None = None,
    ) -> None:
        self.table = table
        #: awaited before each write: raises Fenced once the record's partition is not ours
        self.fence = fence
        #: reads the ledger topic where another writer's records may be (arbitration)
        self.read_log = read_log
        self._logs: dict[int, PartitionLog] = {}
        #: where each key's own *pending* record landed (partition, offset), until settled
        self._pending: dict[str, tuple[int, int]] = {}

    def get(self, key: str) -> ReplyRecord | None:
        raw = self.table.get(key.encode())
        return ReplyRecord.decode(raw) if raw is not None else None

    async def put(self, record: ReplyRecord) -> None:
        where = await self._write(record.key, record.encode())
        if record.state is ReplyState.PENDING:
            self._pending[record.key] = where
        else:
            self._pending.pop(record.key, None)

    def forget(self) -> None:
        """The partitions changed: account for each partition's offsets afresh."""
        self._logs.clear()
        self._pending.clear()

    async def arbitrate(self, record: ReplyRecord) -> Verdict:
        """``record`` (*pending*, about to be sent) against another writer's records of its
        key that landed before it (:mod:`~onceonly.processors.reply.arbitration`)."""
        where = self._pending.get(record.key)
        if where is None or self.read_log is None:
            return Verdict(Ruling.OWN, record)  # recovered, not written here: it came first
        partition, offset = where
        partition_log = self._logs.get(partition)
        if partition_log is None:
            return Verdict(Ruling.OWN, record)
        gap = partition_log.gap(offset)
        if gap is not None:
            first, last = gap
            raw = await self.read_log(partition, first, last)
            partition_log.learn(((o, k.decode(), _decoded(v)) for o, k, v in raw), last)
            log.warning(
                "ledger: another writer's records read",
                partition=partition,
                first=first,
                last=last,
                key=record.key,
            )
        return arbitrate(record, offset, partition_log.others(record.key))

    def get_raw(self, key: str) -> bytes | None:
        raw = self.table.get(key.encode())
        return bytes(raw) if raw is not None else None

    async def put_raw(self, key: str, value: bytes) -> None:
        await self._write(key, value)

    async def _write(self, key: str, value: bytes) -> tuple[int, int]:
        raw = key.encode()
        if self.fence is not None:
            await self.fence("a ledger record")
        partition = self.table.partition_of(raw)
        if partition not in self._logs:  # before the write: what the store holds is known
            self._logs[partition] = PartitionLog(self.table.applied_offset(partition) + 1)
        where = await self.table.write_through(raw, value)
        landed = self._logs.get(where[0])
        if landed is not None:  # None: forgotten meanwhile (a rebalance)
            landed.wrote(where[1])
        return where


def _decoded(value: bytes | None) -> ReplyRecord | None:
    if value is None:
        return None
    try:
        return ReplyRecord.decode(value)
    except SchemaError:
        return None  # an effect's record or a stranger: not a reply's

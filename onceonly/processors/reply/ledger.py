"""The reply ledger over the worker's ``replies`` table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from onceonly.processors.records import Table
from onceonly.schemas.ledger import ReplyRecord


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

    def __init__(self, table: Table, fence: Callable[[str], Awaitable[Any]] | None = None) -> None:
        self.table = table
        #: awaited before each write: raises Fenced once the record's partition is not ours
        self.fence = fence

    def get(self, key: str) -> ReplyRecord | None:
        raw = self.table.get(key.encode())
        return ReplyRecord.decode(raw) if raw is not None else None

    async def put(self, record: ReplyRecord) -> None:
        await self.put_raw(record.key, record.encode())

    def get_raw(self, key: str) -> bytes | None:
        raw = self.table.get(key.encode())
        return bytes(raw) if raw is not None else None

    async def put_raw(self, key: str, value: bytes) -> None:
        raw = key.encode()
        if self.fence is not None:
            await self.fence("a ledger record")
        await self.table.write_through(raw, value)

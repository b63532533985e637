"""The worker's tables: RocksDB options, and the reply ledger over its table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from onceonly.foundation.settings import Settings
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

    def __init__(self, table: Any, fence: Callable[[str], Awaitable[Any]] | None = None) -> None:
        self.table = table  # a faust Table: bytes -> bytes
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
        await self.table.send_changelog(self.table.partition_for_key(raw), raw, value)
        self.table.data[raw] = value  # the store alone: the topic has the record already


def rocks_options(settings: Settings, scale: float = 1.0) -> dict[str, int]:
    return {
        "block_cache_size": max(1 << 20, int(settings.rocksdb_block_cache_bytes * scale)),
        "write_buffer_size": max(1 << 20, int(settings.rocksdb_write_buffer_bytes * scale)),
        "max_write_buffer_number": 2,
        "max_open_files": 256,
        "target_file_size_base": 8 << 20,
    }

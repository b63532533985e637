"""The worker's tables over faust's: RocksDB options, and :class:`FaustTable`, the typed
:class:`~onceonly.processors.records.Table` the rest of the worker uses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterator
from typing import Any

import faust

from onceonly.foundation.settings import Settings
from onceonly.processors.records import applied_after_write
from onceonly.processors.runtime.broker_errors import acknowledged, changelog, changelog_write

log = logging.getLogger("onceonly.tables")


class ContiguousTable(faust.Table[bytes, bytes]):
    """faust's Table, whose store's persisted offset (where its next recovery starts) moves
    past an own changelog write only when the store held every record before it
    (:func:`~onceonly.processors.records.applied_after_write`).

    faust moves it to each acknowledged write's offset. A worker paused past its session
    whose write the broker acknowledges after the next owner's records then starts its
    next recovery of that partition after them: its store never holds them (their
    replies, their dedupe claims) and their messages are answered again."""

    def _on_changelog_sent(self, fut: Any) -> None:
        if self.app.in_transaction:  # exactly-once: faust keeps the offset until a commit
            super()._on_changelog_sent(fut)
            return
        res = fut.result()
        tp = res.topic_partition
        applied = self.data.persisted_offset(tp)
        kept = applied_after_write(applied, res.offset)
        if kept is not None and kept == res.offset:
            self.data.set_persisted_offset(tp, kept)
            return
        held: dict[Any, int | None] = self.__dict__.setdefault("_held_offsets", {})
        if tp in held and held[tp] == applied:
            return  # said at the first write past the gap
        held[tp] = applied
        log.warning(
            "table %s: own write landed at %s[%d]@%d past records this store has not "
            "read; its offset stays %s, so the next recovery of the partition reads them",
            self.name,
            tp.topic,
            tp.partition,
            res.offset,
            applied,
        )


class FaustTable:
    """A faust Table of bytes, behind :class:`~onceonly.processors.records.Table`.

    The only code that reaches into faust's table internals: the RocksDB store of one
    partition (``_db_for_partition``), the bookkeeping key faust keeps in it, and the
    changelog send (``send_changelog``)."""

    def __init__(self, table: Any) -> None:
        self.faust = table

    def get(self, key: bytes) -> bytes | None:
        # The store itself: one RocksDB read. faust's ``Table.get`` reads it twice (``in``
        # then ``[]``, as the table has a ``__missing__``) and first calls every sensor's
        # ``on_table_get``, which onceonly never reads: 2-7 % of the worker's CPU under the
        # reorder hold's, the ledger's and dedupe's reads (docs/benchmarks.md, issue 46).
        # The tables have no default, so a missing key is None either way.
        raw = self.faust.data.get(key)
        return bytes(raw) if raw is not None else None

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.faust[key] = value

    def write_soon(self, key: bytes, value: bytes, partition: int) -> Awaitable[object]:
        """Write ``key`` to ``partition`` as faust's own ``table[key] = value`` does (the
        changelog send, then the store), and return what completes when the changelog took
        it: faust sets a send's failure on the message's future and never calls its callback
        (``Topic._on_published``), and no one else awaits it. The broker's failure is
        raised as :class:`BrokerUnavailable`."""
        sent = self.faust.send_changelog(partition, key, value)
        self._store(key, value, partition)
        return acknowledged(sent, changelog(self.faust.name))

    def __delitem__(self, key: bytes) -> None:
        del self.faust[key]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return ((bytes(k), bytes(v)) for k, v in self.faust.items())

    def values(self) -> Iterator[bytes]:
        return (bytes(v) for v in self.faust.values())

    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        store = self.faust.data
        db = store._db_for_partition(partition)
        bookkeeping = getattr(store, "offset_key", None)  # faust keeps its offset in the DB
        for key, raw in db.items(from_key=after):
            if (after is not None and key == after) or key == bookkeeping:
                continue
            yield bytes(key), bytes(raw)

    async def write_through(
        self, key: bytes, value: bytes, partition: int | None = None
    ) -> tuple[int, int]:
        to = self.faust.partition_for_key(key) if partition is None else partition
        with changelog_write(self.faust.name):
            metadata = await self.faust.send_changelog(to, key, value)
        if partition is None:
            self.faust.data[key] = value  # the store alone: the topic has the record already
        else:  # outside any record (a timer's): faust's store would take the current one's
            self._store(key, value, partition)
        return int(metadata.topic_partition.partition), int(metadata.offset)

    def _store(self, key: bytes, value: bytes, partition: int) -> None:
        """``partition``'s store alone, whatever record is current."""
        store = self.faust.data
        store._db_for_partition(partition).put(key, value)
        store._key_index[key] = partition  # as faust's own write keeps it

    async def delete_through(self, key: bytes, partition: int) -> tuple[int, int]:
        with changelog_write(self.faust.name):
            metadata = await self.faust.send_changelog(partition, key, None)
        del self.faust.data[key]  # the store alone: the topic has the tombstone already
        return int(metadata.topic_partition.partition), int(metadata.offset)

    def partition_of(self, key: bytes) -> int:
        """The partition a write of ``key`` goes to: the current record's."""
        return int(self.faust.partition_for_key(key))

    def applied_offset(self, partition: int) -> int:
        """The offset of the last changelog record in ``partition``'s store (what recovery
        read, or this worker's last write through faust); -1 for none."""
        raw = self.faust.data._db_for_partition(partition).get(self.faust.data.offset_key)
        return int(raw) if raw is not None else -1


def rocks_options(settings: Settings, scale: float = 1.0) -> dict[str, int]:
    return {
        "block_cache_size": max(1 << 20, int(settings.rocksdb_block_cache_bytes * scale)),
        "write_buffer_size": max(1 << 20, int(settings.rocksdb_write_buffer_bytes * scale)),
        "max_write_buffer_number": 2,
        "max_open_files": 256,
        "target_file_size_base": 8 << 20,
    }

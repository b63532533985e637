"""Table recovery in bulk: a partition taken over with little or no local state is loaded
from its changelog with librdkafka, a list of records at a time, before faust replays the
rest record by record.

faust rebuilds a table partition by feeding every changelog record through its consumer,
its changelog queue and its recovery loop one at a time: about 9,000 records/s on the
benchmark machine, so a cold takeover of 1 M dedupe entries (2 M changelog records) took
229 s. :class:`BulkRecovery` keeps faust's recovery as it is and adds one step: once faust
knows where each active changelog partition starts (its persisted offset) and ends (the
highwater), every partition more than ``min_records`` behind is read with
:func:`onceonly.foundation.kafka.read_batches` and written into the partition's own RocksDB with one
``WriteBatch`` per list, the persisted offset in the same batch. faust then starts reading at
that offset, exactly as after a restart with local state, and replays only what was written
since. The records are faust's own bytes (raw key and value, a tombstone deletes), written
the way faust's ``apply_changelog_batch`` writes them.

The step runs inside faust's "build offsets" stage. faust bounds each stage by its broker
request timeout (90 s); this one is bounded by its own progress instead (a read that gets no
record for 5 s fails). A load that fails, or is cut short by a new rebalance, stops between
two batches (the lock below keeps a batch from landing after that) and faust goes on from
the last batch written: a cut costs time, never state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import rocksdict
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP

from onceonly.foundation.kafka import Connection, read_batches

log = logging.getLogger("onceonly.recovery")

#: faust's key for a partition's persisted offset, in every table's RocksDB
OFFSET_KEY = b"__faust\0offset__"

#: reads the records of (topic, partition, first, last) in lists
BatchReader = Callable[[str, int, int, int], Iterator[list[Any]]]


@dataclass(frozen=True, slots=True)
class Span:
    """The offsets of a changelog partition to load in bulk, both included."""

    first: int
    last: int

    @property
    def records(self) -> int:
        return self.last - self.first + 1


def bulk_spans(
    starts: Mapping[TP, int | None], highwaters: Mapping[TP, int | None], min_records: int
) -> dict[TP, Span]:
    """The partitions worth loading in bulk: those at least ``min_records`` behind.

    ``starts`` and ``highwaters`` are faust's: the offset of the last record already applied
    (-1 or None for none) and the offset of the partition's last record (-1 when empty).
    ``min_records`` 0 turns bulk loading off.
    """
    if min_records <= 0:
        return {}
    spans: dict[TP, Span] = {}
    for tp, last in highwaters.items():
        if last is None or last < 0:
            continue
        start = starts.get(tp)
        first = 0 if start is None or start < 0 else start + 1
        if last - first + 1 >= min_records:
            spans[tp] = Span(first, last)
    return spans


def write_batch(db: Any, msgs: Iterable[Any]) -> int:
    """Write one list of changelog records into a partition's RocksDB, with the offset of the
    last one as the partition's persisted offset, in one atomic batch. Returns that offset
    (-1 for an empty list, which writes nothing)."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    last = -1
    for msg in msgs:
        value = msg.value()
        if value is None:
            batch.delete(msg.key())
        else:
            batch.put(msg.key(), value)
        last = msg.offset()
    if last < 0:
        return -1
    batch.put(OFFSET_KEY, str(last).encode())
    db.write(batch)
    return int(last)


class BulkLoad:
    """Loads changelog spans into RocksDB from a worker thread, one batch at a time, and can
    be stopped between two batches (:meth:`stop` waits for a batch being written)."""

    def __init__(self, read: BatchReader) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._stopped = False
        self.batches = 0
        self.write_s = 0.0  #: seconds spent writing to RocksDB (the rest: reading)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True

    def run(self, topic: str, partition: int, span: Span, db: Any, applied: list[int]) -> int:
        """Records written; ``applied[0]`` follows the last offset written as it goes."""
        written = 0
        for msgs in self._read(topic, partition, span.first, span.last):
            with self._lock:
                if self._stopped:
                    break
                began = time.perf_counter()
                offset = write_batch(db, msgs)
                self.write_s += time.perf_counter() - began
                if offset >= 0:
                    applied[0] = offset
            written += len(msgs)
            self.batches += 1
        return written


@dataclass(frozen=True)
class BulkRestore:
    """Where and when to load in bulk: the brokers, the credentials, the threshold."""

    connection: Connection
    min_records: int
    batch: int = 10_000

    def reader(self) -> BatchReader:
        def read(topic: str, partition: int, first: int, last: int) -> Iterator[list[Any]]:
            return read_batches(self.connection, topic, partition, first, last, batch=self.batch)

        return read


class BulkRecovery(Recovery):
    """faust's Recovery with the bulk load before its record-by-record replay."""

    #: under faust's loggers (mode would give a subclass one named after this module, and
    #: replaces any logger it has marked, faust's own included): faust's tables of offsets
    #: stay behind faust's log level like the rest of its lines
    logger = logging.getLogger("faust.tables.recovery.bulk")

    def __init__(self, app: Any, tables: Any, *, restore: BulkRestore, **kwargs: Any) -> None:
        self._restore = restore
        super().__init__(app, tables, **kwargs)

    async def _wait(self, coro: Any, timeout: Any = None) -> None:
        # faust bounds every recovery step by its request timeout (90 s); the step that
        # loads in bulk is bounded by its own progress instead (a read that gets no record
        # for 5 s fails, and faust replays the rest), so a large load is not cut short.
        # Its faust part keeps that timeout: _build_offsets applies it itself
        if _is_build_offsets(coro):
            timeout = None
        await super()._wait(coro, timeout=timeout)

    async def _build_offsets(
        self, consumer: Any, tps: set[TP], destination: MutableMapping[TP, int], title: str
    ) -> None:
        build = super()._build_offsets(consumer, tps, destination, title)  # type: ignore[arg-type]
        try:  # faust's own step keeps its timeout, and faust's way past it: carry on
            await asyncio.wait_for(build, timeout=self.app.conf.broker_request_timeout)
        except TimeoutError:
            log.warning("recovery: no start offsets for the %s changelogs in time", title)
            return
        if title != "active":
            return
        spans = bulk_spans(destination, self.active_highwaters, self._restore.min_records)
        for tp, span in sorted(spans.items()):
            store: Any = self.tp_to_table[tp].data  # type: ignore[attr-defined]
            if not hasattr(store, "_db_for_partition"):  # not a RocksDB table
                continue
            await self._load(tp, span, store._db_for_partition(tp.partition), destination)

    async def _load(
        self, tp: TP, span: Span, db: Any, destination: MutableMapping[TP, int]
    ) -> None:
        load = BulkLoad(self._restore.reader())
        applied = [destination.get(tp, -1)]
        began = time.monotonic()
        work = asyncio.get_running_loop().run_in_executor(
            None, load.run, tp.topic, tp.partition, span, db, applied
        )
        try:
            written = await asyncio.shield(work)
        except asyncio.CancelledError:
            load.stop()  # no batch lands after this: faust may replay from ``applied``
            log.warning(
                "bulk restore of %s[%d] stopped at offset %d of %d by a rebalance",
                tp.topic,
                tp.partition,
                applied[0],
                span.last,
            )
            raise
        except Exception as exc:  # the load is an optimisation: faust's replay remains
            log.warning(
                "bulk restore of %s[%d] failed at offset %d of %d (%s): faust replays the "
                "rest record by record",
                tp.topic,
                tp.partition,
                applied[0],
                span.last,
                exc,
            )
            return
        finally:
            destination[tp] = applied[0]
        took = time.monotonic() - began
        log.info(
            "bulk restore of %s[%d]: %d records (offsets %d-%d) in %.2f s, %.0f/s "
            "(%d batches, %.2f s of it writing)",
            tp.topic,
            tp.partition,
            written,
            span.first,
            span.last,
            took,
            written / took if took > 0 else 0.0,
            load.batches,
            load.write_s,
        )


def _is_build_offsets(coro: Any) -> bool:
    """Whether ``coro`` is a call of Recovery._build_offsets (untraced: faust's tracing
    wraps it, and a traced recovery keeps faust's timeout)."""
    return getattr(coro, "__name__", "") == "_build_offsets"


def table_manager(restore: BulkRestore) -> type[TableManager]:
    """faust's TableManager with :class:`BulkRecovery` as its recovery (for ``TableManager=``
    of the App)."""

    class BulkTableManager(TableManager):
        @property
        def recovery(self) -> Recovery:
            if self._recovery is None:
                self._recovery = BulkRecovery(
                    self.app, self, restore=restore, beacon=self.beacon, loop=self.loop
                )
            return self._recovery

    return BulkTableManager

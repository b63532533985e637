"""The worker's ledger over its ``replies`` table, and its reads of the ledger topic, off
the loop: arbitration's (a few records of a partition, rare) and a take-over's range (the
last compaction lag of a partition)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from onceonly.foundation.kafka import Connection, read_batches, tails
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import LEDGER_COMPACTION_LAG_MS
from onceonly.processors.records import Table
from onceonly.processors.reply.ledger import ReadLog, TableLedger
from onceonly.processors.reply.take_over import Tail


def topic_ledger(
    settings: Settings,
    table: Table,
    fence: Callable[[str], Awaitable[Any]],
    clock: Callable[[], float],
) -> TableLedger:
    """The worker's ledger: ``table`` written behind ``fence``, the topic read for
    arbitration and take-overs, each partition's range measured on ``clock`` (seconds)."""
    return TableLedger(
        table,
        fence=fence,
        read_log=ledger_reader(settings),
        tail=ledger_tail(settings, lambda: datetime.fromtimestamp(clock(), tz=UTC)),
    )


def ledger_reader(settings: Settings) -> ReadLog:
    """Reads records (offset, key, value) of a ledger partition, first to last included."""
    connection = Connection.from_settings(settings)

    def read(partition: int, first: int, last: int) -> list[tuple[int, bytes, bytes | None]]:
        return [
            (int(m.offset()), bytes(m.key() or b""), m.value())
            for batch in read_batches(
                connection, settings.ledger_topic, partition, first, last, batch=1000
            )
            for m in batch
        ]

    async def read_log(
        partition: int, first: int, last: int
    ) -> list[tuple[int, bytes, bytes | None]]:
        return await asyncio.to_thread(read, partition, first, last)

    return read_log


def ledger_tail(
    settings: Settings, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> Tail:
    """A ledger partition's take-over range: from its first record that landed within the
    last compaction lag (the broker's timestamps against ``clock``) to its log end."""
    connection, topic = Connection.from_settings(settings), settings.ledger_topic

    async def tail(partition: int) -> tuple[int, int]:
        since = clock() - timedelta(milliseconds=LEDGER_COMPACTION_LAG_MS)
        found = await asyncio.to_thread(tails, connection, topic, [partition], since)
        return found[partition].start, found[partition].end

    return tail

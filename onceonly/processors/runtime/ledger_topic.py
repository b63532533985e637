"""The worker's ledger over its ``replies`` table, and its reads of the ledger topic, off
the loop: arbitration's and an audit's (a few records of a partition, rare) and a
take-over's (the range of a partition's last compaction lag, then its records).

A read the broker does not answer is tried again, with backoff, for ``READ_PATIENCE_S`` (a
write waits faust's ``producer_request_timeout``, 20 minutes); then the broker is away, as
for a write faust's producer gave up on: the worker's failure
(:class:`~onceonly.processors.exceptions.LedgerUnreadable`; on a lane it exits and reads its
records again), never a dead letter for the messages whose lane was reading. A refusal
that waiting does not mend (a topic missing, credentials refused) is that failure at once.
A read abandoned (its lane cancelled by a drain) runs on in its thread to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay
from tenacity import wait_random_exponential as backoff

from onceonly.foundation.kafka import (
    BrokerUnavailable,
    Connection,
    KafkaAdapterError,
    read_batches,
    tails,
)
from onceonly.foundation.retries import retried
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import LEDGER_COMPACTION_LAG_MS
from onceonly.processors.exceptions import LedgerUnreadable
from onceonly.processors.records import Table
from onceonly.processors.reply.ledger import ReadLog, TableLedger
from onceonly.processors.reply.take_over import Tail

log = structlog.get_logger("onceonly.reply")

#: how long a ledger read the broker does not answer is tried again before the worker exits
READ_PATIENCE_S = 300.0
#: the longest wait between two tries
READ_BACKOFF_MAX_S = 30.0

T = TypeVar("T")


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


async def patient(
    read: Callable[[], T],
    what: str,
    patience_s: float = READ_PATIENCE_S,
    backoff_max_s: float = READ_BACKOFF_MAX_S,
) -> T:
    """``read()`` in a thread, tried again while the broker does not answer (the Kafka
    adapter's ``BrokerUnavailable``) for ``patience_s``; then, or at once for any other of
    its errors, :class:`LedgerUnreadable`."""

    def policy() -> AsyncRetrying:
        def again(state: Any) -> None:
            error = state.outcome.exception() if state.outcome else None
            log.warning(f"{what}: the broker did not answer; trying again", error=str(error))

        return AsyncRetrying(
            retry=retry_if_exception_type(BrokerUnavailable),
            stop=stop_after_delay(patience_s),
            wait=backoff(multiplier=0.5, max=backoff_max_s),
            before_sleep=again,
            reraise=True,
        )

    try:
        return await retried(policy, lambda: asyncio.to_thread(read))
    except BrokerUnavailable as exc:
        raise LedgerUnreadable(
            f"{what}: the broker did not answer for {patience_s:.0f} s ({exc}); the worker "
            "exits and reads its records again"
        ) from exc
    except KafkaAdapterError as exc:
        raise LedgerUnreadable(
            f"{what}: {exc}; the worker exits (fix what the error names, then start it again)"
        ) from exc


def ledger_reader(settings: Settings, patience_s: float = READ_PATIENCE_S) -> ReadLog:
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
        what = f"a read of ledger partition {partition}"
        return await patient(lambda: read(partition, first, last), what, patience_s)

    return read_log


def ledger_tail(
    settings: Settings,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    patience_s: float = READ_PATIENCE_S,
) -> Tail:
    """A ledger partition's take-over range: from its first record that landed within the
    last compaction lag (the broker's timestamps against ``clock``) to its log end."""
    connection, topic = Connection.from_settings(settings), settings.ledger_topic

    async def tail(partition: int) -> tuple[int, int]:
        since = clock() - timedelta(milliseconds=LEDGER_COMPACTION_LAG_MS)
        what = f"the take-over range of ledger partition {partition}"
        found = await patient(
            lambda: tails(connection, topic, [partition], since), what, patience_s
        )
        return found[partition].start, found[partition].end

    return tail

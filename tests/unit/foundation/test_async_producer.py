"""AsyncProducer fails a record the broker does not acknowledge in time, with no timer."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from devstack.ports import free_port
from onceonly.foundation.kafka import AsyncProducer, Connection, ProduceFailed
from onceonly.foundation.kafka._producer import (
    POLL_FAST_S,
    POLL_PATIENCE_S,
    POLL_SLOW_S,
    next_poll_in,
)


def _nowhere(timeout_ms: int = 10_000) -> Connection:
    """A connection to a port where no broker listens."""
    return Connection(f"127.0.0.1:{free_port()}", produce_timeout_ms=timeout_ms)


def _close(producer: AsyncProducer) -> None:
    """Nothing was delivered, and close says so: expected here."""
    with contextlib.suppress(ProduceFailed):
        producer.close(timeout_s=0)


async def test_a_record_not_acknowledged_within_the_timeout_fails() -> None:
    producer = AsyncProducer(_nowhere(), timeout_s=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(ProduceFailed, match=r"within 0\.3 s"):
            await producer.produce("t", b"v")
    finally:
        _close(producer)
    assert time.monotonic() - started < 2.0  # librdkafka alone would take the 10 s


async def test_the_timeout_defaults_to_librdkafkas_message_timeout() -> None:
    assert AsyncProducer(_nowhere(timeout_ms=2500)).timeout_s == 2.5


async def test_every_record_in_flight_fails_at_its_own_deadline() -> None:
    producer = AsyncProducer(_nowhere(), timeout_s=0.3)
    try:
        first = asyncio.ensure_future(producer.produce("t", b"1"))
        await asyncio.sleep(0.2)
        second = asyncio.ensure_future(producer.produce("t", b"2"))
        done, _ = await asyncio.wait([first, second], timeout=0.2)
        assert done == {first}  # the second's deadline is 0.2 s later
        with pytest.raises(ProduceFailed):
            await second
    finally:
        _close(producer)


def test_the_timer_polls_fast_while_reports_came_lately() -> None:
    # a batch's acknowledgement is linger.ms and a round trip away: no backing off meanwhile
    assert next_poll_in(POLL_FAST_S, quiet_for_s=0.0) == POLL_FAST_S
    assert next_poll_in(0.008, quiet_for_s=POLL_PATIENCE_S * 0.99) == POLL_FAST_S


def test_after_its_patience_the_timer_backs_off_doubling_to_its_slowest() -> None:
    waits = []
    interval = POLL_FAST_S
    for _ in range(12):
        interval = next_poll_in(interval, quiet_for_s=POLL_PATIENCE_S)
        waits.append(interval)
    assert waits[:3] == [2 * POLL_FAST_S, 4 * POLL_FAST_S, 8 * POLL_FAST_S]
    assert waits[-1] == POLL_SLOW_S
    assert max(waits) == POLL_SLOW_S

"""What the worker's producer raises when a real broker cannot take a changelog write, and
what onceonly's seam makes of it (``runtime.broker_errors.changelog_write``).

The worker's changelog writes go through faust's aiokafka producer: ``acks=-1``, no
idempotence outside transactions, ``request_timeout_ms`` from faust's
``producer_request_timeout``. Here that producer writes to a broker of this test's own
(an embedded broker, paused with SIGSTOP, as a frozen VM or a partition would leave it),
and to a topic whose ``max.message.bytes`` the record passes. The first must reach the
worker as :class:`BrokerUnavailable` (it exits and reads its records again, no dead
letter: the simulator's finding F36), the second as the record's own failure. A change of
aiokafka's answer to either fails these tests.

A held delivery is acknowledged only once its hold is in the holds changelog (the
simulator's finding F40): :meth:`FaustTable.write_soon` returns what completes then, from
faust's own send (``Table.send_changelog``, whose message future faust fails and whose
callback it never calls when the producer gives the send up). Here it must complete for a
write the broker took (the changelog has it) and fail as :class:`BrokerUnavailable` for one
the paused broker never answered: a faust that dropped the failure would let the record be
acknowledged, its hold lost.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, RequestTimedOutError
from confluent_kafka.admin import AdminClient, NewTopic

from devstack.broker import EmbeddedBroker
from devstack.ports import free_port
from onceonly.foundation.kafka import Connection, read_to_end
from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.runtime.broker_errors import changelog_write
from onceonly.processors.runtime.tables import FaustTable

pytestmark = pytest.mark.integration

#: faust's producer_request_timeout, made short (the worker's is 20 minutes)
REQUEST_TIMEOUT_MS = 3000


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker this test may pause (the session's is other tests' too)."""
    broker = EmbeddedBroker(tmp_path, port=free_port(), heap_mb=256, quiet=True)
    broker.start()
    try:
        yield broker
    finally:
        pid = broker.pid
        if pid is not None and broker.is_running():
            os.kill(pid, signal.SIGCONT)
        broker.kill()


def _topic(bootstrap: str, name: str = "", **config: str) -> str:
    name = name or f"broker-away-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, 1, 1, config=config)], operation_timeout=10
    ).values():
        future.result()
    return name


def _producer(bootstrap: str) -> AIOKafkaProducer:
    """A producer as faust makes it for the worker's table changelogs."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        max_request_size=1 << 20,
    )


async def _write(producer: AIOKafkaProducer, topic: str, value: bytes) -> None:
    with changelog_write("ledger"):
        sent = await producer.send(topic, value, key=b"reply-k", partition=0)
        await sent


async def test_a_write_the_paused_broker_never_answers_is_the_broker_away(
    own_broker: EmbeddedBroker,
) -> None:
    topic = _topic(own_broker.bootstrap)
    producer = _producer(own_broker.bootstrap)
    await producer.start()
    try:
        await _write(producer, topic, b'{"state":"awaiting"}')  # the partition's leader known
        pid = own_broker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(BrokerUnavailable) as raised:
                await _write(producer, topic, b'{"state":"pending"}')
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await producer.stop()

    # aiokafka gave the batch up when the request timeout passed, with the request's own
    # error (seen here: RequestTimedOutError, retriable) or the batch's expiry
    assert isinstance(raised.value.__cause__, RequestTimedOutError | KafkaTimeoutError)


async def test_a_record_the_topic_refuses_stays_the_records_failure(
    kafka_bootstrap: str,
) -> None:
    topic = _topic(kafka_bootstrap, **{"max.message.bytes": "2048"})
    producer = _producer(kafka_bootstrap)
    await producer.start()
    try:
        with pytest.raises(MessageSizeTooLargeError):
            await _write(producer, topic, b"x" * 10_000)
    finally:
        await producer.stop()


async def test_a_holds_write_completes_once_landed_and_fails_when_never_answered(
    own_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    app_id = f"broker-away-{uuid.uuid4().hex[:8]}"
    app = faust.App(
        app_id,
        broker=f"kafka://{own_broker.bootstrap}",
        store="rocksdb://",
        datadir=str(tmp_path / "worker"),
        producer_acks=-1,
        producer_request_timeout=REQUEST_TIMEOUT_MS / 1000,
        autodiscover=False,
        web_enabled=False,
    )
    table = app.Table("holds", default=None, partitions=1, key_type=bytes, value_type=bytes)
    changelog = _topic(own_broker.bootstrap, name=f"{app_id}-holds-changelog")
    holds = FaustTable(table)
    await app.producer.start()
    try:
        await holds.write_soon(b"thread-a", b"held 1", 0)
        pid = own_broker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(BrokerUnavailable) as raised:
                await holds.write_soon(b"thread-b", b"held 2", 0)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await app.producer.stop()

    assert isinstance(raised.value.__cause__, RequestTimedOutError | KafkaTimeoutError)
    landed = read_to_end(Connection(own_broker.bootstrap), changelog)
    # the first write is there; the second may be too (the paused broker read the request
    # once resumed): a failed write may have landed or not, the worker cannot tell
    assert (b"thread-a", b"held 1") in [(m.key(), m.value()) for m in landed]
    assert holds.get(b"thread-a") == b"held 1"  # the store, as faust's own write leaves it

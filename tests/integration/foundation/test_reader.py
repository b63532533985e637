"""The bulk reader on the real broker: the asked offsets, in lists, and nothing past them."""

from __future__ import annotations

import uuid

import pytest

from onceonly.foundation.kafka import (
    Admin,
    Connection,
    TopicSpec,
    read_batches,
    sync_producer,
)

pytestmark = pytest.mark.integration


def _topic_with(kafka_bootstrap: str, count: int) -> str:
    topic = f"reader-{uuid.uuid4().hex[:8]}"
    Admin(Connection(kafka_bootstrap)).ensure_topics([TopicSpec(topic, partitions=1)])
    producer = sync_producer(Connection(kafka_bootstrap, produce_timeout_ms=10_000))
    for n in range(count):
        producer.produce(topic, key=f"k{n}".encode(), value=f"v{n}".encode(), partition=0)
    producer.flush(10)
    return topic


def test_batches_hold_the_range_in_order_and_stop_at_its_last_offset(
    kafka_bootstrap: str,
) -> None:
    topic = _topic_with(kafka_bootstrap, 50)

    batches = list(read_batches(Connection(kafka_bootstrap), topic, 0, 5, 44, batch=8))

    offsets = [m.offset() for b in batches for m in b]
    assert offsets == list(range(5, 45))
    assert all(len(b) <= 8 for b in batches)
    assert batches[0][0].key() == b"k5" and batches[-1][-1].value() == b"v44"


def test_a_range_past_the_end_stops_at_the_partition_end(kafka_bootstrap: str) -> None:
    topic = _topic_with(kafka_bootstrap, 10)

    offsets = [
        m.offset() for b in read_batches(Connection(kafka_bootstrap), topic, 0, 0, 99) for m in b
    ]

    assert offsets == list(range(10))

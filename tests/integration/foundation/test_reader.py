"""The readers on the real broker: the bulk reader (the asked offsets, in lists, and nothing
past them) and the follower (what is written after it was made, and nothing older)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from onceonly.foundation.kafka import (
    Admin,
    Connection,
    Follower,
    TopicRange,
    TopicSpec,
    following,
    ranges,
    read_batches,
    sync_producer,
    topic_ranges,
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


def _produce(kafka_bootstrap: str, topic: str, values: list[str], partitions: int = 1) -> None:
    producer = sync_producer(Connection(kafka_bootstrap, produce_timeout_ms=10_000))
    for n, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=n % partitions)
    assert producer.flush(10) == 0


def test_the_ranges_of_several_topics_are_each_topics_start_to_end_and_none_for_a_missing_one(
    kafka_bootstrap: str,
) -> None:
    connection = Connection(kafka_bootstrap)
    one, two = (f"ranges-{uuid.uuid4().hex[:8]}" for _ in range(2))
    Admin(connection).ensure_topics([TopicSpec(one, partitions=2), TopicSpec(two, partitions=1)])
    _produce(kafka_bootstrap, one, ["a", "b", "c", "d", "e"], partitions=2)
    _produce(kafka_bootstrap, two, ["f", "g", "h", "i"])
    # retention's work: the first two records of two[0] deleted, its start moved to 2
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # held until it answers
    deleted = admin.delete_records([TopicPartition(two, 0, 2)], request_timeout=10)
    for future in deleted.values():
        future.result(timeout=30)
    missing = f"missing-{uuid.uuid4().hex[:8]}"

    found = topic_ranges(connection, [one, two, missing])

    assert found == {
        one: [TopicRange(0, 0, 3), TopicRange(1, 0, 2)],
        two: [TopicRange(0, 2, 4)],
        missing: None,
    }
    assert [found[one], found[two]] == [ranges(connection, t, from_offset=0) for t in (one, two)]


def _taken(follower: Follower, want: int, timeout_s: float = 20.0) -> list[Any]:
    """Poll until ``want`` records came (or the time is up), then once more: none past."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += follower.poll(0.5)
    return got + follower.poll(1.0)


def test_a_follower_hands_over_what_is_written_after_it_was_made_in_every_partition(
    kafka_bootstrap: str,
) -> None:
    topic = f"follow-{uuid.uuid4().hex[:8]}"
    Admin(Connection(kafka_bootstrap)).ensure_topics([TopicSpec(topic, partitions=3)])
    _produce(kafka_bootstrap, topic, [f"old{n}" for n in range(30)], partitions=3)

    with following(Connection(kafka_bootstrap), [topic]) as follower:
        _produce(kafka_bootstrap, topic, [f"new{n}" for n in range(6)], partitions=3)
        taken = _taken(follower, 6)

    assert sorted(m.value() for m in taken) == sorted(f"new{n}".encode() for n in range(6))
    assert {m.partition() for m in taken} == {0, 1, 2}


def test_a_topic_made_after_the_follower_is_followed_from_its_first_record(
    kafka_bootstrap: str,
) -> None:
    there, later = f"follow-{uuid.uuid4().hex[:8]}", f"follow-later-{uuid.uuid4().hex[:8]}"
    Admin(Connection(kafka_bootstrap)).ensure_topics([TopicSpec(there, partitions=1)])

    with following(Connection(kafka_bootstrap), [there, later]) as follower:
        assert follower.poll(0.1) == []
        Admin(Connection(kafka_bootstrap)).ensure_topics([TopicSpec(later, partitions=2)])
        _produce(kafka_bootstrap, later, ["first", "second"], partitions=2)
        taken = _taken(follower, 2)

    assert sorted(m.value() for m in taken) == [b"first", b"second"]

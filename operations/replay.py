"""Replay a range of the deliveries topic, and retry dead letters, through the same pipeline.

The method is a copy, not a rewind: each record of the range is produced again, to the
same partition with the same key, carrying the ``onceonly-replay`` header. Workers keep
running; the group's offsets are never moved, so no live member has to stop. For a
replayed record, dedupe lets *failed* events through again (and only those: succeeded
events are skipped), and the reply ledger still stops anything already sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from foundation.errors import OnceOnlyError
from foundation.kafka import PARTITIONER, Admin
from schemas.envelope import REPLAY_HEADER, TICK_HEADER, Envelope


class ReplayError(OnceOnlyError):
    """A replay cannot be planned or run; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    partition: int
    start: int  #: first offset replayed
    end: int  #: one past the last offset replayed

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"onceonly-replay-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )


def plan(
    bootstrap: str,
    topic: str,
    *,
    from_offset: int | None = None,
    from_time: datetime | None = None,
    partition: int | None = None,
) -> list[PartitionPlan]:
    """Per partition: from where (the offset, or the first record at or after the time)."""
    if (from_offset is None) == (from_time is None):
        raise ReplayError("give exactly one of --from-offset and --from-time")
    partitions = Admin(bootstrap).topic_partitions().get(topic)
    if partitions is None:
        raise ReplayError(f"topic {topic} does not exist; check ONCEONLY_DELIVERIES_TOPIC")
    chosen = range(partitions) if partition is None else [partition]
    if partition is not None and not 0 <= partition < partitions:
        raise ReplayError(f"{topic} has partitions 0..{partitions - 1}, not {partition}")
    consumer = _consumer(bootstrap)
    try:
        plans = []
        for p in chosen:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if from_offset is not None:
                start = max(low, from_offset)
            else:
                assert from_time is not None
                wanted = TopicPartition(topic, p, int(from_time.timestamp() * 1000))
                [found] = consumer.offsets_for_times([wanted], timeout=10)
                start = high if found.offset < 0 else max(low, found.offset)
            plans.append(PartitionPlan(p, min(start, high), high))
        return plans
    except KafkaException as exc:
        raise ReplayError(f"could not read offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()


def records(bootstrap: str, topic: str, plans: list[PartitionPlan]) -> Iterator[Any]:
    """The records of the planned ranges, partition by partition (confluent Messages)."""
    consumer = _consumer(bootstrap)
    try:
        for step in (p for p in plans if p.count):
            consumer.assign([TopicPartition(topic, step.partition, step.start)])
            while True:
                msg = consumer.poll(5.0)
                if msg is None:
                    raise ReplayError(
                        f"no record arrived from {topic}[{step.partition}] within 5 s; "
                        "is the broker up?"
                    )
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise ReplayError(f"reading {topic}[{step.partition}]: {error}")
                offset = int(msg.offset() or 0)
                if offset >= step.end:
                    break
                yield msg
                if offset + 1 >= step.end:
                    break
    finally:
        consumer.close()


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": PARTITIONER,
            "linger.ms": 5,
        }
    )


def replay(
    bootstrap: str,
    topic: str,
    plans: list[PartitionPlan],
    *,
    advance: Callable[[int], None] = lambda n: None,
) -> int:
    """Produce the planned records again with the replay header; return how many."""
    replay_id = uuid.uuid4().hex.encode()
    producer = _producer(bootstrap)
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for msg in records(bootstrap, topic, plans):
        headers = [(k, v) for k, v in (msg.headers() or []) if k != REPLAY_HEADER]
        advance(1)
        if any(k == TICK_HEADER for k, _ in headers):
            continue
        producer.produce(
            topic,
            msg.value(),
            key=msg.key(),
            partition=msg.partition(),
            headers=[*headers, (REPLAY_HEADER, replay_id)],
            on_delivery=on_delivery,
        )
        producer.poll(0)
        sent += 1
    if producer.flush(30) or failures:
        raise ReplayError(
            f"{len(failures) or 'some'} replayed records were not acknowledged "
            f"({failures[:1]}); run the replay again: repeats are harmless"
        )
    return sent


# -- dead letters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    letter: dict[str, Any]

    @property
    def envelopes(self) -> list[Envelope]:
        return [Envelope.from_json(e) for e in self.letter.get("envelopes", [])]


def dead_letters(bootstrap: str, topic: str) -> list[DeadLetter]:
    plans = plan(bootstrap, topic, from_offset=0)
    return [
        DeadLetter(int(msg.offset()), json.loads(msg.value()))
        for msg in records(bootstrap, topic, plans)
    ]


def retry_dead_letters(bootstrap: str, deliveries_topic: str, letters: list[DeadLetter]) -> int:
    """Send the dead letters' envelopes through the pipeline again, as a replay."""
    producer = _producer(bootstrap)
    replay_id = uuid.uuid4().hex.encode()
    sent = 0
    for letter in letters:
        for envelope in letter.envelopes:
            producer.produce(
                deliveries_topic,
                envelope.encode(),
                key=envelope.thread_key.encode(),
                headers=[*envelope.headers(), (REPLAY_HEADER, replay_id)],
            )
            sent += 1
    if producer.flush(30):
        raise ReplayError("dead letters were not all re-sent; run the retry again")
    return sent

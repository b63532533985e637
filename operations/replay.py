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
from datetime import UTC, datetime
from typing import Any

from foundation.errors import OnceOnlyError
from foundation.kafka import (
    KafkaAdapterError,
    Security,
    TopicMissing,
    TopicRange,
    producer_config,
    ranges,
    read,
    sync_producer,
)
from schemas.envelope import REPLAY_HEADER, TICK_HEADER, Envelope


class ReplayError(OnceOnlyError):
    """A replay cannot be planned or run; the message says why and what to do."""


#: a partition's range to replay: the seam's TopicRange
PartitionPlan = TopicRange


def plan(
    bootstrap: str,
    topic: str,
    *,
    from_offset: int | None = None,
    from_time: datetime | None = None,
    partition: int | None = None,
    security: Security | None = None,
) -> list[PartitionPlan]:
    """Per partition: from where (the offset, or the first record at or after the time)."""
    if (from_offset is None) == (from_time is None):
        raise ReplayError("give exactly one of --from-offset and --from-time")
    try:
        return ranges(
            bootstrap,
            topic,
            from_offset=from_offset,
            from_time=from_time,
            partition=partition,
            security=security,
        )
    except TopicMissing as exc:
        raise ReplayError(f"{exc} (ONCEONLY_DELIVERIES_TOPIC, --partition)") from exc
    except KafkaAdapterError as exc:
        raise ReplayError(str(exc)) from exc


def records(
    bootstrap: str, topic: str, plans: list[PartitionPlan], security: Security | None = None
) -> Iterator[Any]:
    """The records of the planned ranges, partition by partition (confluent Messages)."""
    try:
        yield from read(bootstrap, topic, plans, security=security)
    except KafkaAdapterError as exc:
        raise ReplayError(str(exc)) from exc


def _producer(bootstrap: str, security: Security | None) -> Any:
    config = producer_config(bootstrap, timeout_ms=30_000, max_record_bytes=8 << 20)
    return sync_producer({**config, **(security or {})})


def replay(
    bootstrap: str,
    topic: str,
    plans: list[PartitionPlan],
    *,
    advance: Callable[[int], None] = lambda n: None,
    security: Security | None = None,
) -> int:
    """Produce the planned records again with the replay header; return how many."""
    replay_id = uuid.uuid4().hex.encode()
    producer = _producer(bootstrap, security)
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for msg in records(bootstrap, topic, plans, security):
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


#: a record of the dead-letter topic that says which letters a retry sent again
RETRIED_KIND = "retried"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    letter: dict[str, Any]
    #: when ``dead-letters retry`` last sent it again (None: open)
    retried_at: str | None = None

    @property
    def envelopes(self) -> list[Envelope]:
        return [Envelope.from_json(e) for e in self.letter.get("envelopes", [])]

    @property
    def open(self) -> bool:
        return self.retried_at is None


def letters_with_outcomes(records: list[tuple[int, dict[str, Any]]]) -> list[DeadLetter]:
    """The letters among a dead-letter topic's records, each with its latest retry (pure)."""
    retried: dict[int, str] = {}
    for _, value in records:
        if value.get("kind") == RETRIED_KIND:
            for offset in value.get("letters", []):
                retried[int(offset)] = str(value.get("at", ""))
    return [
        DeadLetter(offset, value, retried.get(offset))
        for offset, value in records
        if value.get("kind") != RETRIED_KIND
    ]


def dead_letters(bootstrap: str, topic: str, security: Security | None = None) -> list[DeadLetter]:
    """Every letter of the dead-letter topic, with its latest retry."""
    wanted = plan(bootstrap, topic, from_offset=0, security=security)
    found = records(bootstrap, topic, wanted, security)
    return letters_with_outcomes([(int(msg.offset()), json.loads(msg.value())) for msg in found])


def retry_dead_letters(
    bootstrap: str,
    deliveries_topic: str,
    letters: list[DeadLetter],
    *,
    dead_letter_topic: str | None = None,
    mac_key: bytes | None = None,
    security: Security | None = None,
) -> int:
    """Send the dead letters' envelopes through the pipeline again, as a replay; then note
    on the dead-letter topic which letters were sent, so a later retry of all takes only
    the open ones."""
    producer = _producer(bootstrap, security)
    replay_id = uuid.uuid4().hex.encode()
    sent = 0
    for letter in letters:
        for envelope in letter.envelopes:
            value = envelope.encode()
            producer.produce(
                deliveries_topic,
                value,
                key=envelope.thread_key.encode(),
                headers=[*envelope.headers(mac_key, value), (REPLAY_HEADER, replay_id)],
            )
            sent += 1
    if producer.flush(30):
        raise ReplayError("dead letters were not all re-sent; run the retry again")
    if dead_letter_topic is not None and letters:
        note = {
            "kind": RETRIED_KIND,
            "letters": [letter.offset for letter in letters],
            "replay_id": replay_id.decode(),
            "at": datetime.now(UTC).isoformat(),
        }
        producer.produce(dead_letter_topic, json.dumps(note).encode())
        if producer.flush(30):
            raise ReplayError("the retry was sent but not noted; a retry of all may send it again")
    return sent

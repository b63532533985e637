"""The processor benchmark's records: AgentMail and Stripe envelopes produced in bulk, and
the ledger read back; dedupe entries written straight to the events changelog
(``--takeover-fill changelog``) with the worker's own functions and encoding."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bench._load import agentmail_body, thread_message
from bench._procs import BenchError, console, security

if TYPE_CHECKING:
    from onceonly.schemas.envelope import Envelope

Record = tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]  # key, value, headers


def as_record(envelope: Envelope) -> Record:
    """The record ingest produces for an envelope: keyed by thread, with its headers."""
    headers: list[tuple[str, str | bytes | None]] = [*envelope.headers()]
    return envelope.thread_key.encode(), envelope.encode(), headers


def ingested(body: str | bytes, now: datetime) -> Record:
    """The record ingest produces for an AgentMail event's ``body`` received at ``now``."""
    from onceonly.ingest import normalise

    text = body.decode() if isinstance(body, bytes) else body
    return as_record(normalise.agentmail(text, {}, now))


def agentmail_records(
    count: int, start: int = 0, message_id: Callable[[int], str] | None = None
) -> Iterator[Record]:
    """What ingest produces for ``count`` distinct AgentMail ``message.received`` events
    (~1.5 KB bodies, 1024 threads, every message and event id distinct; message ``n``'s
    Message-ID ``message_id(n)`` if given, else a random one)."""
    now = datetime.now(UTC)
    for n in range(start, start + count):
        mid = message_id(n) if message_id is not None else None
        yield ingested(agentmail_body(n, now, message_id=mid), now)


def thread_records(tag: str, numbers: Iterable[int]) -> Iterator[tuple[str, Record]]:
    """(Message-ID, record) of the ``n``-th message of a run tagged ``tag``, for each of
    ``numbers``: alone in a thread of its own (:func:`bench._load.thread_message`), the
    record ingest produces for it."""
    now = datetime.now(UTC)
    for n in numbers:
        message_id, body = thread_message(tag, n, now)
        yield message_id, ingested(body, now)


def stripe_records(count: int, tag: str) -> Iterator[Record]:
    """What ingest produces for ``count`` distinct Stripe ``invoice.paid`` events, one
    invoice (so one thread key) each: deduped and recorded, no effect handler."""
    from onceonly.ingest import normalise

    now = datetime.now(UTC)
    created = int(now.timestamp())
    for n in range(count):
        body = json.dumps(
            {
                "id": f"evt_{tag}{n:010d}",
                "object": "event",
                "api_version": "2024-06-20",
                "created": created,
                "type": "invoice.paid",
                "livemode": False,
                "data": {
                    "object": {
                        "id": f"in_{tag}{n:010d}",
                        "object": "invoice",
                        "amount_paid": 4200,
                        "currency": "eur",
                        "customer": f"cus_{n % 5000:06d}",
                    }
                },
            }
        )
        envelope = normalise.stripe(body, {}, now)
        yield as_record(envelope)


def produce_on(
    bootstrap: str, topic: str, records: Iterable[tuple[int, Record]], what: str
) -> None:
    """Each record to the partition it comes with (acks=all, whatever its key hashes to);
    BenchError, saying ``what`` they are, if any is not stored within 30 s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for partition, (key, value, headers) in records:
        producer.produce(topic, value, key=key, headers=headers, partition=partition)
    if producer.flush(30):
        raise BenchError(f"could not produce {what} to {topic}")


def produce(bootstrap: str, topic: str, records: Iterator[Record], total: int) -> float:
    """Produce every record with confluent-kafka in a tight loop (batched, acks=all);
    return the seconds it took. Raises BenchError if any record is not stored."""
    from confluent_kafka import Producer

    from onceonly.foundation.kafka import Connection, producer_config

    failures: list[str] = []

    def on_error(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        producer_config(
            Connection(
                bootstrap,
                security(),
                produce_timeout_ms=120_000,
                record_max_bytes=8 * 1024 * 1024,
                produce_linger_ms=20,
            ),
            **{
                "batch.num.messages": 10_000,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 500_000,
                "queue.buffering.max.kbytes": 512 * 1024,
                "delivery.report.only.error": True,
                "on_delivery": on_error,
                "log_level": 3,
            },
        )
    )
    started = time.perf_counter()
    report = max(total // 10, 1)
    for n, (key, value, headers) in enumerate(records, 1):
        while True:
            try:
                producer.produce(topic, value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)
        if total >= 100_000 and n % report == 0:
            console.print(f"  produced {n:,} of {total:,} …")
    left = producer.flush(120)
    if left or failures:
        raise BenchError(
            f"{left} records were not acknowledged and {len(failures)} failed "
            f"({failures[:3]}) producing to {topic}; see the broker log"
        )
    return time.perf_counter() - started


def ledger_sent(bootstrap: str, topic: str, partitions: int) -> int:
    """Distinct reply keys whose latest ledger record says ``sent``, read from the topic."""
    from onceonly.foundation.kafka import Connection, read_to_end

    latest: dict[bytes, str] = {}
    for msg in read_to_end(Connection(bootstrap, request_timeout_s=60), topic):
        key, value = msg.key(), msg.value()
        if key is not None and value is not None:
            latest[key] = json.loads(value).get("state", "")
    return sum(1 for state in latest.values() if state == "sent")


def dedupe_records(count: int, tag: str, now_ms: int | None = None) -> Iterator[Record]:
    """The events changelog's records of ``count`` recorded Stripe events: claim, outcome."""
    from onceonly.processors.dedupe import decisions as dedupe

    now = int(time.time() * 1000) if now_ms is None else now_ms
    for n in range(count):
        key = f"stripe:evt_{tag}{n:010d}".encode()
        position = (n % 8, n)
        claim = dedupe.decide(None, position=position, now_ms=now, replay=False).entry
        assert claim is not None
        done = dedupe.finished(True, position=position, now_ms=now)
        yield key, json.dumps(claim.to_json()).encode(), []
        yield key, json.dumps(done.to_json()).encode(), []


def fill_changelog(bootstrap: str, app_id: str, count: int, tag: str) -> float:
    """Produce ``count`` entries (2 records each) to ``<app_id>-events-changelog``; seconds."""
    topic = f"{app_id}-events-changelog"
    console.print(f"(6) writing {count:,} dedupe entries ({2 * count:,} records) to {topic} …")
    seconds = produce(bootstrap, topic, dedupe_records(count, tag), 2 * count)
    console.print(f"(6) written in {seconds:.1f} s")
    return seconds

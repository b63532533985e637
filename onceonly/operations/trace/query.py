"""Read the topics a trace needs, and hand the records to the pure assembly.

A trace reads, from the beginning: every partition of the deliveries topic (records that
do not contain the id are dropped unread), then only the thread's partition of the ledger,
the decisions topic and the two changelogs, and the whole dead-letter topic. It needs no
worker. Its cost is a read of the deliveries topic (7 days); fine for a person or a page,
not for a loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from onceonly.foundation.errors import OnceOnlyError
from onceonly.foundation.kafka import (
    Connection,
    KafkaAdapterError,
    TopicMissing,
    TopicRange,
    ranges,
    read,
)
from onceonly.foundation.settings import Settings
from onceonly.operations.trace.assemble import REPLY_PREFIX, Sources, assemble, decisions, envelopes
from onceonly.operations.trace.model import Record, Skip, Trace
from onceonly.processors.reorder.holds import thread_of

Keep = Callable[[Record], bool]


class TraceError(OnceOnlyError):
    """A topic a trace needs cannot be read; the message says which and why."""


def record_of(msg: Any) -> Record:
    """A confluent-kafka Message as the assembly's Record."""
    _, stamp = msg.timestamp()
    return Record(
        partition=int(msg.partition()),
        offset=int(msg.offset()),
        timestamp_ms=int(stamp),
        key=msg.key(),
        value=msg.value(),
        headers=tuple((k, bytes(v or b"")) for k, v in (msg.headers() or ())),
    )


def _ranges(connection: Connection, topic: str, partitions: set[int] | None) -> list[TopicRange]:
    found = ranges(connection, topic, from_offset=0)
    return [r for r in found if partitions is None or r.partition in partitions]


def scan(
    connection: Connection, topic: str, keep: Keep, partitions: set[int] | None = None
) -> list[Record]:
    """The records of ``topic`` (of ``partitions``, or all) that ``keep`` keeps; none for a
    topic that does not exist (a changelog before any worker ran)."""
    try:
        wanted = _ranges(connection, topic, partitions)
        return [r for r in map(record_of, read(connection, topic, wanted)) if keep(r)]
    except TopicMissing:
        return []
    except KafkaAdapterError as exc:
        raise TraceError(f"could not read {topic}: {exc}") from exc


def _needles(idents: Iterable[str]) -> list[bytes]:
    """The ids as they appear in a record's JSON (raw, and JSON-escaped)."""
    out: set[bytes] = set()
    for ident in idents:
        out.add(ident.encode())
        out.add(json.dumps(ident, ensure_ascii=False)[1:-1].encode())
    return sorted(out)


def _contains(needles: list[bytes]) -> Keep:
    return lambda r: r.value is not None and any(n in r.value for n in needles)


def _changelog(settings: Settings, table: str) -> str:
    return f"{settings.app_id}-{table}-changelog"


def _covering(
    connection: Connection, topic: str, ledger: list[Record], parts: set[int]
) -> list[Record]:
    """The ledger records of the replies that cover these (a burst's earlier messages)."""
    keys = set()
    for record in ledger:
        try:
            covered_by = json.loads(record.value or b"null") or {}
        except ValueError:
            continue
        if isinstance(covered_by, dict) and covered_by.get("covered_by"):
            keys.add(str(covered_by["covered_by"]).encode())
    return scan(connection, topic, lambda r: r.key in keys, parts) if keys else []


def _by_reply_key(settings: Settings, key: str) -> tuple[list[Record], list[Record], set[int]]:
    """A reply key: its ledger record names the message, on the thread's partition."""
    connection, wanted = Connection.from_settings(settings), key.encode()
    ledger = scan(connection, settings.ledger_topic, lambda r: r.key == wanted)
    parts = {r.partition for r in ledger}
    messages = [str(json.loads(r.value)["message_id"]) for r in ledger if r.value]
    if not messages:
        return [], ledger, parts
    needles = _contains(_needles(messages))
    return scan(connection, settings.deliveries_topic, needles, parts), ledger, parts


def _by_id(settings: Settings, ident: str) -> tuple[list[Record], list[Record], set[int]]:
    """An event or message id: the deliveries that contain it, then its thread's ledger."""
    connection = Connection.from_settings(settings)
    # ``provider:event_id`` (a dedupe key, as the logs print it): the record has the id alone
    bare = ident.split(":", 1)[1] if ":" in ident else ident
    deliveries = scan(connection, settings.deliveries_topic, _contains(_needles({ident, bare})))
    parts = {r.partition for r in deliveries}
    messages = [ident, *(d.envelope.message_id or "" for d in envelopes(deliveries))]
    # no delivery left (the topic keeps 7 days): the ledger may still have the message
    in_ledger = _contains(_needles(m for m in messages if m))
    ledger = scan(connection, settings.ledger_topic, in_ledger, parts or None)
    return deliveries, ledger, parts or {r.partition for r in ledger}


def find(settings: Settings, ident: str) -> Trace | None:
    """The trace of a message id, an event id or a reply key; None if no topic names it."""
    connection = Connection.from_settings(settings)
    ident = ident.strip()
    by_key = ident.startswith(REPLY_PREFIX)
    deliveries, ledger, parts = (_by_reply_key if by_key else _by_id)(settings, ident)
    ledger += _covering(connection, settings.ledger_topic, ledger, parts)
    found = envelopes(deliveries)
    keys = {d.envelope.dedupe_key.encode() for d in found}
    threads = {d.envelope.thread_key.encode() for d in found}
    events = _contains(_needles(d.envelope.event_id for d in found))
    parts = parts if found else set()  # nothing to look for in the per-thread topics

    def per_thread(topic: str, keep: Keep) -> list[Record]:
        return scan(connection, topic, keep, parts) if parts else []

    sources = Sources(
        deliveries=deliveries,
        events=per_thread(_changelog(settings, "events"), lambda r: r.key in keys),
        holds=per_thread(
            _changelog(settings, "holds"), lambda r: thread_of(r.key or b"") in threads
        ),
        ledger=ledger,
        dead_letters=scan(connection, settings.dead_letter_topic, lambda r: True),
        decisions=per_thread(settings.decisions_topic, events),
    )
    return assemble(ident, sources)


def recent_skips(settings: Settings, limit: int = 50) -> list[Skip]:
    """The latest ``limit`` skips of the worker (newest first), with their reasons and ids."""
    connection, topic = Connection.from_settings(settings), settings.decisions_topic
    try:
        tails = [
            TopicRange(r.partition, max(r.start, r.end - limit), r.end)
            for r in ranges(connection, topic, from_offset=0)
        ]
        found = decisions(map(record_of, read(connection, topic, tails)))
    except TopicMissing:
        return []
    except KafkaAdapterError as exc:
        raise TraceError(f"could not read {topic}: {exc}") from exc
    return sorted(found, key=lambda s: s.at, reverse=True)[:limit]

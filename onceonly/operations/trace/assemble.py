"""Build a :class:`Trace` from the records of the topics: pure, no Kafka.

Where each fact comes from:

* deliveries: the deliveries topic (partition, offset, time, the ``onceonly-replay`` header);
* the dedupe verdict and the release: the ``events`` changelog. The delivery that claimed
  its event is its entry's ``owner``; the claim is written when the thread's buffer
  releases the delivery (or, with a window of 0, when its lane takes it up), so the first
  *in progress* entry's time is the release; the last entry says how it ended;
* held: the ``holds`` changelog, each held event's entry (or an earlier onceonly's write of
  a thread's whole buffer);
* skips (a duplicate, the agent's own mail, already answered, declined): the decisions topic;
* the reply: the ledger topic, every write of its record; dead letters: their topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from onceonly.foundation import tracing
from onceonly.operations.replay import letters_with_outcomes
from onceonly.operations.trace.model import (
    DeadLetterTrace,
    DeliveryTrace,
    LedgerChange,
    LedgerTrace,
    Record,
    Skip,
    Trace,
)
from onceonly.processors.reorder.holds import entry_of, thread_of
from onceonly.schemas.decision import DecisionRecord, Stage
from onceonly.schemas.envelope import REPLAY_HEADER, TICK_HEADER, Envelope
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import EventEntry, EventState, ReplyRecord

REPLY_PREFIX = "reply-"


@dataclass(frozen=True, slots=True)
class Sources:
    """The records to assemble a trace from; any superset of the relevant ones will do."""

    deliveries: Sequence[Record] = ()
    events: Sequence[Record] = ()  #: the ``<app id>-events-changelog`` topic
    holds: Sequence[Record] = ()  #: the ``<app id>-holds-changelog`` topic
    ledger: Sequence[Record] = ()
    dead_letters: Sequence[Record] = ()
    decisions: Sequence[Record] = ()


@dataclass(frozen=True, slots=True)
class Delivered:
    record: Record
    envelope: Envelope


def when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def envelopes(records: Iterable[Record]) -> list[Delivered]:
    """The delivery records that hold an envelope (ticks and unreadable records left out)."""
    out = []
    for record in records:
        if record.value is None or record.header(TICK_HEADER) is not None:
            continue
        try:
            out.append(Delivered(record, Envelope.decode(record.value)))
        except (SchemaError, RecursionError):
            continue
    return out


def ledger_records(records: Iterable[Record]) -> dict[str, list[tuple[Record, ReplyRecord]]]:
    """Reply key -> every write of its ledger record, oldest first (effects left out)."""
    out: dict[str, list[tuple[Record, ReplyRecord]]] = {}
    for record in records:
        key = (record.key or b"").decode("utf-8", "replace")
        if record.value is None or not key.startswith(REPLY_PREFIX):
            continue
        try:
            out.setdefault(key, []).append((record, ReplyRecord.decode(record.value)))
        except SchemaError:
            continue
    return out


def removals(records: Iterable[Record]) -> dict[str, datetime]:
    """Reply key -> when a tombstone (the retention sweep's) followed its last write."""
    out: dict[str, datetime] = {}
    for record in records:
        key = (record.key or b"").decode("utf-8", "replace")
        if not key.startswith(REPLY_PREFIX):
            continue
        if record.value is None:
            out[key] = when(record.timestamp_ms)
        else:
            out.pop(key, None)
    return out


def match(
    ident: str, delivered: Sequence[Delivered], ledger: dict[str, list[tuple[Record, ReplyRecord]]]
) -> tuple[str, list[Delivered], set[str]]:
    """What ``ident`` is, the deliveries that carry it, and the reply keys that answer it."""
    if ident in ledger:
        last = ledger[ident][-1][1]
        found = [
            d
            for d in delivered
            if d.envelope.message_id == last.message_id and d.envelope.thread_key == last.thread_key
        ]
        return "reply_key", found, {ident}
    by_event = [d for d in delivered if ident in (d.envelope.event_id, d.envelope.dedupe_key)]
    by_message = [d for d in delivered if d.envelope.message_id == ident]
    matched = "event_id" if by_event else "message_id"
    found = by_event or by_message
    messages = {d.envelope.message_id for d in found if d.envelope.message_id} or {ident}
    threads = {d.envelope.thread_key for d in found}
    keys = {
        key
        for key, writes in ledger.items()
        if writes[-1][1].message_id in messages
        and (not threads or writes[-1][1].thread_key in threads)
    }
    return matched, found, keys


def _entries(events: Sequence[Record], key: bytes) -> list[EventEntry]:
    out = []
    for record in events:
        if record.key == key and record.value is not None:
            try:
                out.append(EventEntry.from_json(json.loads(record.value)))
            except (ValueError, TypeError, KeyError):
                continue
    return out


def _held_at(holds: Sequence[Record], thread_key: str, position: list[int]) -> datetime | None:
    """When the delivery at ``position`` was held: its event's own entry (``event_key``),
    or a write of the whole buffer by an earlier onceonly."""
    key = thread_key.encode()
    for record in holds:
        entry = entry_of(record.key or b"")
        if thread_of(record.key or b"") != key or record.value is None:
            continue
        try:
            data = json.loads(record.value)
            held = [(data["a"], data["i"])] if entry else [(h[2], h[3]) for h in data["held"]]
        except (ValueError, TypeError, KeyError, IndexError):
            continue
        for arrived_ms, item in held:
            if isinstance(item, dict) and item.get("position") == position:
                return when(int(arrived_ms))
    return None


def decisions(records: Iterable[Record]) -> list[DecisionRecord]:
    out = []
    for record in records:
        if record.value is not None:
            try:
                out.append(DecisionRecord.decode(record.value))
            except SchemaError:
                continue
    return out


def delivery_trace(d: Delivered, sources: Sources, skips: Sequence[Skip]) -> DeliveryTrace:
    """One delivery: its dedupe verdict, hold, release and end, and its skips."""
    record, envelope = d.record, d.envelope
    position = (record.partition, record.offset)
    mine = [s for s in skips if (s.partition, s.offset) == position]
    early = [s for s in mine if s.stage in (Stage.HOLD, Stage.DEDUPE)]
    owned = [
        e for e in _entries(sources.events, envelope.dedupe_key.encode()) if e.owner == position
    ]
    claims = [e for e in owned if e.state is EventState.IN_PROGRESS]
    ends = [e for e in owned if e.state in (EventState.SUCCEEDED, EventState.FAILED)]
    if owned:
        verdict, stage = "accepted", None
        released = when(claims[0].updated_at_ms) if claims else None
    elif early:
        verdict, stage, released = early[0].reason, early[0].stage.value, early[0].at
    else:
        verdict, stage, released = "unseen", None, None
    return DeliveryTrace(
        partition=record.partition,
        offset=record.offset,
        at=when(record.timestamp_ms),
        provider=envelope.provider,
        event_id=envelope.event_id,
        event_type=envelope.event_type,
        message_id=envelope.message_id,
        thread_key=envelope.thread_key,
        received_at=envelope.received_at,
        replay=record.header(REPLAY_HEADER) is not None,
        verdict=verdict,
        verdict_stage=stage,
        held_at=_held_at(sources.holds, envelope.thread_key, list(position)),
        released_at=released,
        finished=ends[-1].state.value if ends else None,
        finished_at=when(ends[-1].updated_at_ms) if ends else None,
        skips=tuple(s for s in mine if s not in early) if owned else (),
        trace_id=tracing.trace_id(record.headers),
    )


def ledger_trace(
    key: str,
    ledger: dict[str, list[tuple[Record, ReplyRecord]]],
    removed: dict[str, datetime] | None = None,
) -> LedgerTrace:
    writes = ledger[key]
    record = writes[-1][1]
    covering = ledger.get(record.covered_by or "")
    return LedgerTrace(
        record=record,
        history=tuple(
            LedgerChange(r.state, when(rec.timestamp_ms), r.attempts, r.error) for rec, r in writes
        ),
        covering=covering[-1][1] if covering else None,
        removed_at=(removed or {}).get(key),
    )


def _names(letter: dict[str, Any]) -> set[str]:
    """The ids a dead letter names: its key, its events', their messages'."""
    names = {str(letter.get("key") or "")}
    for envelope in [*letter.get("envelopes", []), *letter.get("envelopes_omitted", [])]:
        names.update(str(envelope.get(f) or "") for f in ("event_id", "message_id"))
    record = letter.get("record") or {}
    names.add(str(record.get("message_id") or ""))
    return names - {""}


def dead_letter_traces(
    records: Sequence[Record], names: set[str], positions: set[tuple[int, int]]
) -> list[DeadLetterTrace]:
    parsed = []
    for record in records:
        try:
            value = json.loads(record.value or b"")
        except ValueError:
            continue
        if isinstance(value, dict):
            parsed.append((record.offset, value))
    out = []
    for letter in letters_with_outcomes(parsed):
        body = letter.letter
        where = (body.get("partition"), body.get("offset"))
        if not (_names(body) & names or where in positions):
            continue
        envelopes = [*body.get("envelopes", []), *body.get("envelopes_omitted", [])]
        out.append(
            DeadLetterTrace(
                id=letter.offset,
                at=str(body.get("at", "")),
                check=str(body.get("check", "")),
                reason=str(body.get("reason", "")),
                key=body.get("key"),
                attempts=body.get("attempts"),
                last_error=body.get("last_error"),
                event_ids=tuple(str(e.get("event_id")) for e in envelopes),
                retried_at=letter.retried_at,
            )
        )
    return out


def assemble(ident: str, sources: Sources) -> Trace | None:
    """The trace of ``ident`` (a message id, an event id or a reply key); None if no
    delivery, ledger record or dead letter names it."""
    ledger, removed = ledger_records(sources.ledger), removals(sources.ledger)
    matched, found, keys = match(ident, envelopes(sources.deliveries), ledger)
    skips = decisions(sources.decisions)
    deliveries = tuple(delivery_trace(d, sources, skips) for d in found)
    messages = {d.message_id for d in deliveries if d.message_id}
    messages.update(ledger[k][-1][1].message_id for k in keys)
    names = {ident, *messages, *keys, *(d.event_id for d in deliveries)}
    letters = dead_letter_traces(
        sources.dead_letters, names, {(d.partition, d.offset) for d in deliveries}
    )
    if not deliveries and not keys and not letters:
        return None
    return Trace(
        ident=ident,
        matched=matched,
        message_ids=tuple(sorted(messages)),
        deliveries=deliveries,
        ledger=tuple(ledger_trace(k, ledger, removed) for k in sorted(keys)),
        dead_letters=tuple(letters),
    )

"""Answers from the index: the drafts waiting, a reply's latest record, a trace's records.

Each is a few prefix scans whose length is the answer's, then the same pure code the
whole-topic readers use (:func:`~onceonly.operations.trace.assemble`, ReplyRecord). Every
answer carries :class:`~onceonly.operations.index.lag.Behind`: how many records the index
had not read when it answered, so a command can say so rather than answer stale silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

from onceonly.foundation.kafka import Connection
from onceonly.foundation.settings import Settings
from onceonly.operations.index.build import TopicEnds, freshness
from onceonly.operations.index.lag import Behind
from onceonly.operations.index.layout import (
    DRAFTS_PREFIX,
    Kind,
    Topic,
    names_prefix,
    position_of,
    record_key,
    records_prefix,
    reply_key,
    reply_of_draft,
    unpack,
)
from onceonly.operations.index.store import IndexMissing, IndexStore
from onceonly.operations.index.usage import Counts
from onceonly.operations.index.usage import day as usage_of
from onceonly.operations.trace.assemble import REPLY_PREFIX, Sources, assemble, envelopes
from onceonly.operations.trace.model import Record, Trace
from onceonly.schemas.ledger import ReplyRecord

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    value: T
    behind: Behind
    source: str  #: what answered, for the person reading it
    #: the records the index had not read were read from the topics too: nothing missing
    caught_up: bool = False

    def line(self) -> str:
        if self.caught_up:
            return f"answered from {self.source}: as the topic is now"
        return f"answered from {self.source}; {self.behind.line()}"


def no_index_reason(settings: Settings) -> str | None:
    """Why a command must scan the topics instead (None: an index answers)."""
    if settings.index_dir is None:
        return "no ONCEONLY_INDEX_DIR set"
    if not (settings.index_dir / "CURRENT").exists():
        return f"no index at {settings.index_dir} yet (run `onceonly index --follow`)"
    return None


@contextmanager
def opened(settings: Settings) -> Iterator[IndexStore]:
    if settings.index_dir is None:
        raise IndexMissing("no ONCEONLY_INDEX_DIR set")
    store = IndexStore.reader(settings.index_dir)
    try:
        yield store
    finally:
        store.close()


#: the topics' ends the answers of the current view share (:func:`one_view`)
_view: ContextVar[TopicEnds | None] = ContextVar("onceonly_index_view", default=None)


@contextmanager
def one_view() -> Iterator[None]:
    """Answers asked for inside (and in the tasks and threads started inside: they copy the
    context) read the topics' ends once between them, for one freshness line."""
    token = _view.set(TopicEnds())
    try:
        yield
    finally:
        _view.reset(token)


def answered(settings: Settings, store: IndexStore, value: T) -> Answer[T]:
    behind = freshness(Connection.from_settings(settings), settings, store, _view.get())
    return Answer(value, behind, f"the index at {store.path}")


def drafts(store: IndexStore) -> list[ReplyRecord]:
    """The drafts awaiting a decision, oldest first."""
    out = []
    for key, _ in store.scan(DRAFTS_PREFIX):
        record = latest(store, reply_of_draft(key))
        if record is not None:
            out.append(record)
    return out


def latest(store: IndexStore, key: str) -> ReplyRecord | None:
    value = store.get(reply_key(key))
    return None if value is None else ReplyRecord.decode(value)


def _named(store: IndexStore, kind: Kind, idents: Iterable[str], topic: Topic) -> list[Record]:
    """The records of ``topic`` that name any of ``idents`` as ``kind``, each once."""
    found: dict[tuple[int, int], Record] = {}
    for ident in dict.fromkeys(idents):
        for key, _ in store.scan(names_prefix(kind, ident, topic)):
            where = position_of(key)
            if where not in found and (raw := store.get(record_key(topic, *where))) is not None:
                found[where] = unpack(raw)
    return sorted(found.values(), key=lambda r: (r.partition, r.offset))


def _ledger_of(store: IndexStore, ident: str, messages: set[str]) -> list[Record]:
    ledger = (
        _named(store, Kind.REPLY, [ident], Topic.LEDGER) if ident.startswith(REPLY_PREFIX) else []
    )
    ledger += _named(store, Kind.MESSAGE, messages, Topic.LEDGER)
    covering = {c for r in ledger if (c := _field(r, "covered_by"))}
    ledger += _named(store, Kind.REPLY, covering, Topic.LEDGER)
    unique = {(r.partition, r.offset): r for r in ledger}
    return sorted(unique.values(), key=lambda r: (r.partition, r.offset))


def _field(record: Record, name: str) -> str | None:
    """A field of a ledger record's JSON (None: absent, or not a reply's record)."""
    try:
        value = json.loads(record.value or b"null")
    except ValueError:
        return None
    found = value.get(name) if isinstance(value, dict) else None
    return str(found) if found else None


def trace_sources(store: IndexStore, ident: str) -> Sources:
    """The records a trace of ``ident`` needs (a superset: the assembly picks)."""
    ident = ident.strip()
    bare = ident.split(":", 1)[1] if ":" in ident else ident
    if ident.startswith(REPLY_PREFIX):
        history = _named(store, Kind.REPLY, [ident], Topic.LEDGER)
        replies = {m for r in history if (m := _field(r, "message_id"))}
        deliveries = _named(store, Kind.MESSAGE, replies, Topic.DELIVERIES)
    else:
        deliveries = _named(store, Kind.EVENT, [ident, bare], Topic.DELIVERIES)
        deliveries += _named(store, Kind.MESSAGE, [ident], Topic.DELIVERIES)
    found = envelopes(deliveries)
    messages = {ident, *(d.envelope.message_id or "" for d in found)} - {""}
    events = {d.envelope.event_id for d in found}
    return Sources(
        deliveries=deliveries,
        events=_named(store, Kind.EVENT, (d.envelope.dedupe_key for d in found), Topic.EVENTS),
        holds=_named(store, Kind.THREAD, (d.envelope.thread_key for d in found), Topic.HOLDS),
        ledger=_ledger_of(store, ident, messages),
        dead_letters=[unpack(v) for _, v in store.scan(records_prefix(Topic.DEAD_LETTERS))],
        decisions=_named(store, Kind.EVENT, events, Topic.DECISIONS),
    )


def approvals(settings: Settings) -> Answer[list[ReplyRecord]]:
    """The drafts waiting, from the index (IndexMissing: none built)."""
    with opened(settings) as store:
        return answered(settings, store, drafts(store))


def usage(settings: Settings, day: str) -> Answer[list[tuple[str, str, Counts]]]:
    """The model usage of ``day`` (``YYYY-MM-DD``) per inbox and model, from the index."""
    with opened(settings) as store:
        return answered(settings, store, usage_of(store, day))


def trace(settings: Settings, ident: str) -> Answer[Trace | None]:
    """The trace of ``ident`` from the index (IndexMissing: none built)."""
    with opened(settings) as store:
        return answered(settings, store, assemble(ident.strip(), trace_sources(store, ident)))

"""What a batch of one topic's records writes to the index (pure, given a lookup).

Each record is kept by position (``rec``) and named by every id it carries (``by``, see
:mod:`~onceonly.operations.index.names`). A ledger record also replaces its reply's latest
value and moves it in or out of the drafts waiting (:mod:`~onceonly.operations.index.drafts`),
judged against where the write before it was listed: the batch's own, else the index's
(``latest``), and records its message's time under its inbox (where a catch-up without
--since starts; kept when the reply is tombstoned). A ledger value's JSON is decoded once.
A dead letter joins the open letters; a retry note moves the letters it names from open to
retried, as :func:`onceonly.operations.replay.letters_with_outcomes` judges the whole topic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import structlog

from onceonly.operations.index import drafts, usage
from onceonly.operations.index.layout import (
    Topic,
    inbox_key,
    name_key,
    open_letter_key,
    pack,
    record_key,
    reply_key,
    retried_key,
    waiting_key,
)
from onceonly.operations.index.names import NAMES_OF, Names, of_reply
from onceonly.operations.index.store import Writes
from onceonly.operations.trace.assemble import REPLY_PREFIX
from onceonly.operations.trace.model import Record
from onceonly.schemas.dead_letter import RETRIED_KIND, noted_letters, parse_record

log = structlog.get_logger("onceonly.index")

Latest = Callable[[bytes], bytes | None]


def _decoded(record: Record) -> dict[str, Any] | None:
    try:
        data = json.loads(record.value or b"null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _ledger(writes: Writes, key: str, record: Record, latest: Latest) -> Names:
    """The ledger record's writes besides its position; its names."""
    data = _decoded(record)
    if not key.startswith(REPLY_PREFIX) or (record.value is not None and data is None):
        if key.startswith(REPLY_PREFIX):
            log.warning(
                "index: ledger record not decodable, drafts unchanged",
                key=key,
                partition=record.partition,
                offset=record.offset,
            )
        return []
    marker = waiting_key(key)
    before = writes.current(marker, latest)
    try:
        after = drafts.listed_as(key, data)
    except (KeyError, ValueError):
        after = None
    change = drafts.change(before, after)
    for gone in change.remove:
        writes.delete(gone)
    for added in change.add:
        writes.put(added, b"")
    if after is None:
        writes.delete(marker)
    else:
        writes.put(marker, after)
    if record.value is None:
        writes.delete(reply_key(key))  # its ``inbox`` entry stays: catch-up's start
    else:
        usage.replace(writes, latest, _before(writes, reply_key(key), latest), data)
        writes.put(reply_key(key), record.value)
        if (entry := message_entry(key, data or {})) is not None:
            writes.put(entry, b"")
    return of_reply(key, data or {})


def _before(writes: Writes, key: bytes, latest: Latest) -> dict[str, Any] | None:
    """The reply's latest value before this record (its JSON): the batch's, else the index's."""
    raw = writes.current(key, latest)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def message_entry(key: str, data: dict[str, Any]) -> bytes | None:
    """The ``inbox`` entry of a reply's ledger value (its JSON): its inbox, and the answered
    message's own time, else when the record was written, as catch-up's whole read takes
    it (None: the value names neither)."""
    inbox, when = data.get("inbox_id"), data.get("message_at") or data.get("created_at")
    if not isinstance(inbox, str) or not inbox or not isinstance(when, str):
        return None
    try:
        return inbox_key(inbox, datetime.fromisoformat(when), key)
    except ValueError:
        return None


def _dead_letter(writes: Writes, record: Record, latest: Latest) -> None:
    """A letter is open until a retry note names it (the note's ``at`` kept as when); a
    note that named its offset before it was written closes it too, as a whole read does."""
    value = parse_record(record.value)
    if value.get("kind") != RETRIED_KIND:
        closed = retried_key(record.offset)
        if closed not in writes.puts and latest(closed) is None:
            writes.put(open_letter_key(record.offset), b"")
        return
    for offset in noted_letters(value):
        writes.delete(open_letter_key(offset))
        writes.put(retried_key(offset), str(value.get("at", "")).encode())


def plan(topic: Topic, records: Iterable[Record], latest: Latest) -> Writes:
    """The index's changes for ``records`` of ``topic``, in their order."""
    writes = Writes()
    names = NAMES_OF[topic]
    for record in records:
        where = (record.partition, record.offset)
        writes.put(record_key(topic, *where), pack(record))
        if topic is Topic.LEDGER:
            key = (record.key or b"").decode("utf-8", "replace")
            found = _ledger(writes, key, record, latest)
        elif topic is Topic.DEAD_LETTERS:
            _dead_letter(writes, record, latest)
            found = []
        else:
            found = names(record)
        for kind, ident in found:
            writes.put(name_key(kind, ident, topic, *where), b"")
    return writes

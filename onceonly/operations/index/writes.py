"""What a batch of one topic's records writes to the index (pure, given a lookup).

Each record is kept by position (``rec``) and named by every id it carries (``by``, see
:mod:`~onceonly.operations.index.names`). A ledger record also replaces its reply's latest
value and moves it in or out of the drafts waiting (:mod:`~onceonly.operations.index.drafts`),
judged against the value before it: the batch's own, else the index's (``latest``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from onceonly.operations.index import drafts
from onceonly.operations.index.layout import Topic, name_key, pack, record_key, reply_key
from onceonly.operations.index.names import NAMES_OF
from onceonly.operations.index.store import Writes
from onceonly.operations.trace.assemble import REPLY_PREFIX
from onceonly.operations.trace.model import Record
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.index")

Latest = Callable[[bytes], bytes | None]


def _reply(value: bytes | None) -> ReplyRecord | None:
    if value is None:
        return None
    try:
        return ReplyRecord.decode(value)
    except SchemaError:
        return None


def _ledger(writes: Writes, record: Record, latest: Latest) -> None:
    key = (record.key or b"").decode("utf-8", "replace")
    if not key.startswith(REPLY_PREFIX):
        return
    where = reply_key(key)
    before = writes.get(where) if where in writes.puts else latest(where)
    if where in writes.deletes:
        before = None
    after = _reply(record.value)
    if record.value is not None and after is None:
        log.warning(
            "index: ledger record not decodable, drafts unchanged",
            key=key,
            partition=record.partition,
            offset=record.offset,
        )
        return
    change = drafts.change(_reply(before), after)
    for gone in change.remove:
        writes.delete(gone)
    for added in change.add:
        writes.put(added, b"")
    if record.value is None:
        writes.delete(where)
    else:
        writes.put(where, record.value)


def plan(topic: Topic, records: Iterable[Record], latest: Latest) -> Writes:
    """The index's changes for ``records`` of ``topic``, in their order."""
    writes = Writes()
    names = NAMES_OF[topic]
    for record in records:
        where = (record.partition, record.offset)
        writes.put(record_key(topic, *where), pack(record))
        for kind, ident in names(record):
            writes.put(name_key(kind, ident, topic, *where), b"")
        if topic is Topic.LEDGER:
            _ledger(writes, record, latest)
    return writes

"""What ids a topic record is found by: pure decisions, one per topic, no RocksDB in them.

A record is indexed under every id an operator may ask about that it carries: a delivery
under its event id, its dedupe key (``provider:event_id``, as the logs print it), its
message id and its thread; a ledger record under its reply key, message id and thread; a
skip under its event id and message id; a dedupe entry under its dedupe key (the
changelog's key) and a thread's buffer under its thread key. Records with no id (a tick,
an unreadable value, a ledger effect) are kept by position only.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from onceonly.operations.index.layout import Kind, Topic
from onceonly.operations.trace.assemble import REPLY_PREFIX
from onceonly.operations.trace.model import Record
from onceonly.processors.reorder.holds import thread_of
from onceonly.schemas.envelope import TICK_HEADER, Envelope
from onceonly.schemas.exceptions import SchemaError

Names = list[tuple[Kind, str]]


def _present(*pairs: tuple[Kind, object]) -> Names:
    return [(kind, str(ident)) for kind, ident in pairs if ident]


def _json(value: bytes | None) -> dict[str, object]:
    try:
        data = json.loads(value or b"null")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def of_delivery(record: Record) -> Names:
    if record.value is None or record.header(TICK_HEADER) is not None:
        return []
    try:
        envelope = Envelope.decode(record.value)
    except (SchemaError, RecursionError):
        return []  # an approval decision, or a record the worker dead-letters
    return _present(
        (Kind.EVENT, envelope.event_id),
        (Kind.EVENT, envelope.dedupe_key),
        (Kind.MESSAGE, envelope.message_id),
        (Kind.THREAD, envelope.thread_key),
    )


def of_ledger(record: Record) -> Names:
    key = (record.key or b"").decode("utf-8", "replace")
    return of_reply(key, _json(record.value))


def of_reply(key: str, data: dict[str, object]) -> Names:
    """A ledger record's names from its key and its JSON (decoded once, by the caller)."""
    if not key.startswith(REPLY_PREFIX):
        return []  # an effect's record: no operator read asks for it
    return _present(
        (Kind.REPLY, key),
        (Kind.MESSAGE, data.get("message_id")),
        (Kind.THREAD, data.get("thread_key")),
    )


def of_decision(record: Record) -> Names:
    data = _json(record.value)
    return _present((Kind.EVENT, data.get("event_id")), (Kind.MESSAGE, data.get("message_id")))


def of_changelog_key(kind: Kind) -> Callable[[Record], Names]:
    def names(record: Record) -> Names:
        return _present((kind, (record.key or b"").decode("utf-8", "replace")))

    return names


def of_hold(record: Record) -> Names:
    """A holds entry names its thread (a held event's own entry too: ``event_key``)."""
    thread = thread_of(record.key or b"")
    return _present((Kind.THREAD, thread.decode("utf-8", "replace")))


def of_dead_letter(record: Record) -> Names:
    return []  # a trace reads them all (they wait for an operator: few)


NAMES_OF: dict[Topic, Callable[[Record], Names]] = {
    Topic.DELIVERIES: of_delivery,
    Topic.LEDGER: of_ledger,
    Topic.DEAD_LETTERS: of_dead_letter,
    Topic.DECISIONS: of_decision,
    Topic.EVENTS: of_changelog_key(Kind.EVENT),
    Topic.HOLDS: of_hold,
}

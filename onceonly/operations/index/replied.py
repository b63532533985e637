"""What catch-up asks of the reply ledger, answered from the index
(:class:`~onceonly.operations.answered.Ledger`): is a listed message's reply settled (one
lookup of its reply's latest value, ``reply/<reply key>``), and the inbox's latest
recorded message at or before a time (one seek back among ``inbox/<inbox id>/...``).

Both are brought up to the ledger's end with the records the index had not read yet,
read once when catch-up opens the index (from its stored offsets: as many records as it
is behind, a handful while ``onceonly index --follow`` runs) and folded as they come into
the same compact :class:`~onceonly.operations.answered.Answered` a whole read makes; a key
those records wrote is judged by them, as :func:`~onceonly.operations.index.reads.reply`
judges one. A catch-up costs what it lists and the index's lag, not the ledger's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from onceonly.foundation.kafka import Connection
from onceonly.foundation.settings import Settings
from onceonly.operations.answered import Answered, is_settled
from onceonly.operations.index.answers import Answer, opened
from onceonly.operations.index.layout import (
    inbox_bound,
    inbox_prefix,
    reply_key,
    time_of_inbox_entry,
)
from onceonly.operations.index.reads import caught_up, each_unread
from onceonly.operations.index.store import IndexStore
from onceonly.operations.trace.assemble import REPLY_PREFIX
from onceonly.operations.trace.model import Record
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.catchup")


@dataclass(slots=True)
class Unread:
    """The ledger records the index had not read, folded: what they say, and which reply
    keys they wrote (for those, they and not the index say whether the reply is settled)."""

    answered: Answered = field(default_factory=Answered)
    keys: set[str] = field(default_factory=set)

    def add(self, record: Record) -> None:
        key = (record.key or b"").decode("utf-8", "replace")
        if not key.startswith(REPLY_PREFIX):
            return  # an effect's record: no listed message has its key
        self.keys.add(key)
        self.answered.add(key, _decoded(key, record.value))

    @classmethod
    def of(cls, records: Iterable[Record]) -> Unread:
        unread = cls()
        for record in records:
            unread.add(record)
        return unread


def _decoded(key: str, value: bytes | None) -> ReplyRecord | None:
    if value is None:
        return None
    try:
        return ReplyRecord.decode(value)
    except SchemaError:
        log.warning("catch-up took an undecodable ledger record as unsettled", reply_key=key)
        return None


class _Settled:
    """The settled reply keys, looked up one at a time."""

    def __init__(self, replied: Replied) -> None:
        self._replied = replied

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._replied.is_settled(key)


class Replied:
    """The reply ledger as catch-up asks it, from an open index and its unread records."""

    def __init__(self, store: IndexStore, unread: Unread) -> None:
        self._store = store
        self._unread = unread

    @property
    def settled(self) -> _Settled:
        return _Settled(self)

    def is_settled(self, key: str) -> bool:
        if key in self._unread.keys:
            return key in self._unread.answered.settled
        return is_settled(_decoded(key, self._store.get(reply_key(key))))

    def last_message_at(self, inbox_id: str, before: datetime | None = None) -> datetime | None:
        start = None if before is None else inbox_bound(inbox_id, before)
        entry = next(self._store.backwards(inbox_prefix(inbox_id), start), None)
        indexed = None if entry is None else time_of_inbox_entry(entry[0])
        newer = self._unread.answered.last_message_at(inbox_id, before)
        return max((t for t in (indexed, newer) if t is not None), default=None)


@contextmanager
def replied(settings: Settings) -> Iterator[Answer[Replied]]:
    """The index, open while catch-up lists, with the ledger records it had not read
    (IndexMissing: none built); the answer says how many those were."""
    with opened(settings) as store:
        unread = Unread()
        connection = Connection.from_settings(settings)
        count = 0
        for record in each_unread(connection, store, settings.ledger_topic):
            unread.add(record)
            count += 1
        how = caught_up(store, settings.ledger_topic, count)
        yield Answer(Replied(store, unread), how.behind, how.source, caught_up=True)


def settled_keys(settings: Settings, keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` the ledger holds settled now, from the index and the records it has
    not read yet (what catch-up polls while it waits for the worker)."""
    with replied(settings) as answer:
        return {key for key in keys if key in answer.value.settled}

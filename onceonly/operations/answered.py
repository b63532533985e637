"""What catch-up asks of the reply ledger, and its answer from the whole ledger topic.

Catch-up asks two things (:class:`Ledger`): is a reply key's reply settled (the listed
message it stands for is skipped), and what is the latest message of an inbox the ledger
recorded, at or before a time (where a catch-up without --since starts). Two answers
exist: :class:`Answered`, the whole ledger topic read once into a compact set and lists of
times (here), and the operator index's lookups
(:class:`onceonly.operations.index.replied.Replied`), which cost what catch-up lists, not
what the ledger holds. :func:`onceonly.operations.catchup.ledger_for` picks one.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import structlog

from onceonly.foundation.kafka import Connection
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.catchup")

#: a reply in one of these states is final: catch-up neither feeds it nor waits for it
#: (*declined*: the writer or a person said no; no email will come)
SETTLED = frozenset({ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED})


def is_settled(record: ReplyRecord | None) -> bool:
    """A reply's latest record (None: none, or a tombstone) is final (pure)."""
    return record is not None and record.state in SETTLED


def message_time(record: ReplyRecord) -> datetime:
    """The answered message's own time; a record from before the ledger kept it counts
    when it was written."""
    return record.message_at or record.created_at


class Ledger(Protocol):
    """What catch-up needs of the reply ledger."""

    @property
    def settled(self) -> Container[str]:
        """The reply keys (account and message id) whose reply is settled."""
        ...

    def last_message_at(self, inbox_id: str, before: datetime | None = None) -> datetime | None:
        """The latest time of a message of the inbox the ledger recorded (at or ``before``
        a time)."""
        ...


@dataclass(slots=True)
class Answered:
    """The reply ledger read whole, once: the reply keys (account and message id) whose
    reply is settled, and each account's recorded message times (where a catch-up without
    --since starts). A set of keys and a list of times, not the records: a listed message
    is compared with it by its reply key. Its cost grows with the ledger; with an operator
    index built, catch-up asks the index instead
    (:class:`onceonly.operations.index.replied.Replied`: a lookup per listed message, one
    seek for the start), which answers the same two questions."""

    settled: set[str] = field(default_factory=set)
    times: dict[str, list[datetime]] = field(default_factory=dict)

    def add(self, key: str, record: ReplyRecord | None) -> None:
        """One ledger record in topic order (None: a tombstone); the latest per key wins."""
        if is_settled(record):
            self.settled.add(key)
        else:
            self.settled.discard(key)
        if record is not None:
            self.times.setdefault(record.inbox_id, []).append(message_time(record))

    def last_message_at(self, inbox_id: str, before: datetime | None = None) -> datetime | None:
        times = self.times.get(inbox_id, ())
        return max((t for t in times if before is None or t <= before), default=None)

    @classmethod
    def of(cls, records: Iterable[ReplyRecord]) -> Answered:
        answered = cls()
        for record in records:
            answered.add(record.key, record)
        return answered


def read_answered(connection: Connection, topic: str) -> Answered:
    """The reply ledger read once, record by record, into :class:`Answered`."""
    from onceonly.foundation.kafka import ranges, read
    from onceonly.schemas.exceptions import SchemaError

    answered = Answered()
    for msg in read(connection, topic, ranges(connection, topic, from_offset=0)):
        key = (msg.key() or b"").decode()
        if msg.value() is None:
            answered.add(key, None)
            continue
        try:
            answered.add(key, ReplyRecord.decode(msg.value()))
        except SchemaError:
            log.warning("catch-up skipped an undecodable ledger record", key=key)
    return answered


def last_answered(
    answered: Ledger, inbox_id: str, *, before: datetime | None = None
) -> datetime | None:
    """The latest time of a message of the inbox the ledger recorded (at or ``before`` a
    time): its own time, not when its reply was written, since a reply written late must
    not move a start past mail whose webhooks were lost. Records from before the ledger
    kept message times count when they were written."""
    return answered.last_message_at(inbox_id, before)

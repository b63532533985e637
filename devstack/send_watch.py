"""What ``python -m devstack send`` reads after its post: the records written about its
deliveries, from the moment before the post, until every delivery's outcome is known.

A follower (one consumer over every partition of the topics, made before the post, so it
starts where each partition ended then) hands over what is written as it is written:
ingest's delivery records, the worker's dedupe claims (the events changelog), its skips
(the decisions topic) and the reply ledger. Nothing older is read, so the wait costs what
these deliveries cost, however long the topics' history; and it ends at the first record
after which every outcome is known (:func:`onceonly.operations.outcomes.outcomes_known`),
or at the deadline with whatever was written by then. The worker's word on each delivery
is the one ``onceonly trace`` gives: its pure assembly, run on these records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from onceonly.foundation.settings import Settings
from onceonly.operations.outcomes import (
    Sent,
    accepted,
    by_message,
    outcomes_known,
    worker_verdicts,
)
from onceonly.operations.trace import Record, Sources, assemble
from onceonly.operations.trace.assemble import ledger_records
from onceonly.operations.trace.query import record_of
from onceonly.schemas.ledger import ReplyRecord

#: the longest one poll waits, so the deadline is never overrun by more
POLL_S = 0.5


class Follows(Protocol):
    """A :class:`onceonly.foundation.kafka.Follower`, as the watch uses it."""

    def poll(self, timeout_s: float) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Topics:
    """The topics the worker writes a delivery's fate to, by what they hold."""

    deliveries: str
    events: str  #: the dedupe table's changelog: each event's claim and its end
    decisions: str  #: the worker's skips
    ledger: str

    @classmethod
    def of(cls, settings: Settings) -> Topics:
        return cls(
            deliveries=settings.deliveries_topic,
            # faust names a table's changelog <app id>-<table>-changelog
            events=f"{settings.app_id}-events-changelog",
            decisions=settings.decisions_topic,
            ledger=settings.ledger_topic,
        )

    def all(self) -> list[str]:
        return [self.deliveries, self.events, self.decisions, self.ledger]


@dataclass(slots=True)
class Written:
    """The records written since the post that name one of the deliveries."""

    by_topic: dict[str, list[Record]] = field(default_factory=dict)

    def sources(self, topics: Topics) -> Sources:
        return Sources(
            deliveries=self.by_topic.get(topics.deliveries, []),
            events=self.by_topic.get(topics.events, []),
            decisions=self.by_topic.get(topics.decisions, []),
            ledger=self.by_topic.get(topics.ledger, []),
        )


def needles(sent: Sequence[Sent]) -> list[bytes]:
    """The deliveries' event and message ids as a record's JSON holds them (raw and
    JSON-escaped): a record that holds none of them is about something else."""
    ids = {i for item in sent for i in (item.event_id, item.message_id) if i}
    escaped = {json.dumps(i, ensure_ascii=False)[1:-1] for i in ids}
    return sorted(i.encode() for i in ids | escaped)


def names_one(record: Record, wanted: Sequence[bytes]) -> bool:
    """Whether the record's key (a dedupe key names its event) or value names an id."""
    return any(n in (record.key or b"") or n in (record.value or b"") for n in wanted)


def replies_in(ledger: Iterable[Record]) -> dict[str, ReplyRecord]:
    """Message id to the latest write of its reply's ledger record."""
    return by_message({key: writes[-1][1] for key, writes in ledger_records(ledger).items()})


def verdicts_in(sent: Sequence[Sent], sources: Sources) -> dict[str, list[str]]:
    """Event id to the worker's word on each of its deliveries, in topic order (as
    ``onceonly trace`` says it: :attr:`DeliveryTrace.outcome`)."""
    found: dict[str, list[tuple[int, int, str]]] = {}
    for event in dict.fromkeys(item.event_id for item in sent if accepted(item.status)):
        trace = assemble(event, sources)
        deliveries = trace.deliveries if trace is not None else ()
        found[event] = [
            (d.partition, d.offset, d.outcome) for d in deliveries if d.event_id == event
        ]
    return worker_verdicts(found)


@dataclass(frozen=True, slots=True)
class Watched:
    replies: dict[str, ReplyRecord]  #: message id to its reply's ledger record
    seen: dict[str, list[str]]  #: event id to the worker's words, one per delivery
    known: bool  #: every outcome was known (False: the deadline came first)


def watch(
    sent: Sequence[Sent],
    follower: Follows,
    topics: Topics,
    *,
    wait_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> Watched:
    """Take what ``follower`` hands over until every delivery's outcome is known, or
    ``wait_s`` has passed; what is known then."""
    deadline = clock() + wait_s
    wanted = needles(sent)
    written = Written()
    while True:
        sources = written.sources(topics)
        replies, seen = replies_in(sources.ledger), verdicts_in(sent, sources)
        known = outcomes_known(sent, replies, seen)
        left = deadline - clock()
        if known or left <= 0:
            return Watched(replies, seen, known)
        for msg in follower.poll(min(left, POLL_S)):
            record = record_of(msg)
            if names_one(record, wanted):
                written.by_topic.setdefault(str(msg.topic()), []).append(record)

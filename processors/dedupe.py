"""Dedupe on (provider, event_id): the decision, and the expiry of old entries.

Pure functions over :class:`~schemas.ledger.EventEntry`; the worker keeps the entries
in a changelog-backed table and calls these.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from schemas.ledger import EventEntry, EventState


class Verdict(StrEnum):
    PROCESS = "process"  #: new, or the owning record again after a crash
    DUPLICATE = "duplicate"  #: already succeeded
    IN_PROGRESS = "in_progress"  #: another delivery of this event owns it
    FAILED = "failed"  #: dead-lettered; only an explicit replay retries it


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    entry: EventEntry | None  #: what to store before processing (None: store nothing)

    @property
    def skip(self) -> bool:
        return self.verdict is not Verdict.PROCESS


def decide(
    current: EventEntry | None,
    *,
    position: tuple[int, int],
    now_ms: int,
    replay: bool = False,
) -> Decision:
    """What to do with a delivery of an event, given what the table holds for it.

    ``position`` is the (partition, offset) of the delivery record. A record that
    already owns an in-progress entry is the same record redelivered after a crash,
    so it resumes; any other record of that event is a duplicate and is skipped.
    """
    claim = EventEntry(EventState.IN_PROGRESS, now_ms, position)
    if current is None:
        return Decision(Verdict.PROCESS, claim)
    match current.state:
        case EventState.SUCCEEDED:
            return Decision(Verdict.DUPLICATE, None)
        case EventState.FAILED:
            return Decision(Verdict.PROCESS, claim) if replay else Decision(Verdict.FAILED, None)
        case EventState.IN_PROGRESS | EventState.ACCEPTED:
            if current.owner == position:
                return Decision(Verdict.PROCESS, claim)
            return Decision(Verdict.IN_PROGRESS, None)
    raise AssertionError(current.state)  # pragma: no cover - exhaustive


def finished(succeeded: bool, *, position: tuple[int, int], now_ms: int) -> EventEntry:
    """The entry to store once an event's processing ends."""
    state = EventState.SUCCEEDED if succeeded else EventState.FAILED
    return EventEntry(state, now_ms, position)


K = TypeVar("K")  #: a table key: str in tests, bytes in the worker's store


def expired(
    entries: Iterable[tuple[K, EventEntry]], *, now_ms: int, retention_ms: int
) -> Iterator[K]:
    """Keys whose last change is older than the retention: delete them (tombstones)."""
    cutoff = now_ms - retention_ms
    for key, entry in entries:
        if entry.updated_at_ms < cutoff:
            yield key

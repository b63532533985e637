"""Dedupe on (provider, event_id): the decision, and the expiry of old entries.

Pure functions over :class:`~onceonly.schemas.ledger.EventEntry`; the worker keeps the entries
in a changelog-backed table and calls these.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from onceonly.foundation.settings import Settings
from onceonly.schemas.ledger import EventEntry, EventState


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
    read_from: int | None = None,
) -> Decision:
    """What to do with a delivery of an event, given what the table holds for it.

    ``position`` is the (partition, offset) of the delivery record. A record that
    already owns an in-progress entry is the same record redelivered after a crash,
    so it resumes; any other record of that event is a duplicate and is skipped, unless
    the claim is stale (:func:`stale`; ``read_from``: the partition's first offset this
    worker read since it was given the partition, its committed offset then).
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
            if current.owner == position or stale(current, position, read_from):
                return Decision(Verdict.PROCESS, claim)
            return Decision(Verdict.IN_PROGRESS, None)
    raise AssertionError(current.state)  # pragma: no cover - exhaustive


def stale(current: EventEntry, position: tuple[int, int], read_from: int | None) -> bool:
    """Whether an in-progress claim owned by another record of the partition is left by a
    record committed before this worker was given the partition (below ``read_from``):
    its work ended and was acknowledged, but its outcome never landed (a table write faust
    does not await, lost while the broker was away: the simulator's finding F37). Left
    so, the event could never be processed again: a retry of its dead letter met it *in
    progress* and was dead-lettered again, alone, its reply's covered messages in no
    letter. It is processed again instead; the reply ledger decides what is still owed."""
    owner = current.owner
    if current.state not in _CLAIMED or owner == position or read_from is None:
        return False
    return owner[0] == position[0] and owner[1] < read_from


#: the states of a claim whose work is under way (ACCEPTED: written by older versions)
_CLAIMED = frozenset({EventState.IN_PROGRESS, EventState.ACCEPTED})


def raced(verdict: Verdict | str, replay: bool) -> bool:
    """Whether a skipped delivery is a dead letter's retry that met its event in progress:
    another delivery of it (its original, read again after a rebalance) is being processed,
    and ends as its letter said, *failed*, while the operator's retry, which closed the
    letter, would be lost (the simulator's finding F27). Such a retry is dead-lettered
    again (``retry_raced``), so its message stays in an open letter."""
    return replay and Verdict(verdict) is Verdict.IN_PROGRESS


def finished(succeeded: bool, *, position: tuple[int, int], now_ms: int) -> EventEntry:
    """The entry to store once an event's processing ends."""
    state = EventState.SUCCEEDED if succeeded else EventState.FAILED
    return EventEntry(state, now_ms, position)


K = TypeVar("K", str, bytes)  #: a table key: str in tests, bytes in the worker's store


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long an entry lives: its provider's own window, or the default.

    The provider is the part of the key before the first ``:`` (keys are
    ``provider:event_id`` in the ``events`` table and ``provider:thread`` in ``holds``)."""

    default_ms: int
    by_provider_ms: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> Retention:
        by_provider = settings.dedupe_retention_by_provider.items()
        return cls(_ms(settings.dedupe_retention), {p: _ms(d) for p, d in by_provider})

    @property
    def shortest_ms(self) -> int:
        return min([self.default_ms, *self.by_provider_ms.values()])

    def for_key(self, key: str | bytes) -> int:
        raw = key.decode(errors="replace") if isinstance(key, bytes) else key
        provider, sep, _ = raw.partition(":")
        return self.by_provider_ms.get(provider, self.default_ms) if sep else self.default_ms

    def expires_at_ms(self, key: str | bytes, updated_at_ms: int) -> int:
        """When an entry of this key last changed at ``updated_at_ms`` may go."""
        return updated_at_ms + self.for_key(key)


def expired(
    entries: Iterable[tuple[K, EventEntry]], *, now_ms: int, retention: Retention
) -> Iterator[K]:
    """Keys whose last change is older than their provider's retention: delete them
    (tombstones)."""
    for key, entry in entries:
        if retention.expires_at_ms(key, entry.updated_at_ms) < now_ms:
            yield key

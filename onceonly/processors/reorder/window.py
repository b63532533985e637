"""Per-thread reordering by payload time, within a hold window.

A thread's buffer opens with its first held event and is released whole once that
event has waited ``window_ms``: everything that arrived meanwhile comes out sorted by
(occurred_at, event_id). An event older than what its thread already released is
*late*: it is still released (never dropped), and flagged so it is counted and logged.
A window of 0 holds nothing: each event is released as it arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

SortKey = tuple[int, str]  # (occurred_at in ms, event_id)


@dataclass(frozen=True, slots=True)
class Held:
    sort_key: SortKey
    arrived_ms: int
    item: Any  #: whatever the caller holds (the worker: the encoded envelope and its offset)


@dataclass(frozen=True, slots=True)
class ThreadBuffer:
    held: tuple[Held, ...] = ()
    #: the greatest sort key released so far on this thread
    released_up_to: SortKey | None = None
    #: the partition the thread's events come from (the worker ticks that partition)
    partition: int = -1
    #: when the buffer last changed, for expiring idle threads' watermarks
    updated_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "held": [[h.sort_key[0], h.sort_key[1], h.arrived_ms, h.item] for h in self.held],
            "up_to": list(self.released_up_to) if self.released_up_to else None,
            "p": self.partition,
            "updated": self.updated_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ThreadBuffer:
        up_to = data.get("up_to")
        return cls(
            held=tuple(Held((int(t), str(e)), int(a), item) for t, e, a, item in data["held"]),
            released_up_to=(int(up_to[0]), str(up_to[1])) if up_to else None,
            partition=int(data.get("p", -1)),
            updated_ms=int(data.get("updated", 0)),
        )

    @property
    def opened_ms(self) -> int | None:
        return min((h.arrived_ms for h in self.held), default=None)


@dataclass(frozen=True, slots=True)
class Release:
    """Events to process now, in order; ``late`` marks the ones that arrived too late."""

    events: tuple[Held, ...] = ()
    late: frozenset[SortKey] = field(default_factory=frozenset)


def hold(buffer: ThreadBuffer, event: Held) -> ThreadBuffer:
    """Add an event to its thread's buffer (a repeat of a held event id is kept once)."""
    if any(h.sort_key == event.sort_key for h in buffer.held):
        return buffer
    return replace(buffer, held=(*buffer.held, event), updated_ms=event.arrived_ms)


def due(buffer: ThreadBuffer, *, now_ms: int, window_ms: int) -> bool:
    opened = buffer.opened_ms
    return opened is not None and now_ms >= opened + window_ms


def release(buffer: ThreadBuffer, *, now_ms: int, window_ms: int) -> tuple[Release, ThreadBuffer]:
    """Release the whole buffer if it is due; return what to process and the new buffer."""
    if not due(buffer, now_ms=now_ms, window_ms=window_ms):
        return Release(), buffer
    ordered = tuple(sorted(buffer.held, key=lambda h: h.sort_key))
    watermark = buffer.released_up_to
    late = frozenset(
        h.sort_key for h in ordered if watermark is not None and h.sort_key < watermark
    )
    top = max([h.sort_key for h in ordered] + ([watermark] if watermark else []))
    return Release(ordered, late), ThreadBuffer(
        held=(), released_up_to=top, partition=buffer.partition, updated_ms=now_ms
    )


def take(
    buffer: ThreadBuffer, *, now_ms: int, window_ms: int, busy: frozenset[SortKey] = frozenset()
) -> Release:
    """What a release processes now, leaving the buffer as it is until :func:`settle`.

    The events not ``busy`` (already being processed) come out whole, sorted, once the
    oldest of them has waited ``window_ms`` (a window of 0: at once, which is how a reply
    being written takes in whatever else of its thread has arrived).
    """
    waiting = [h for h in buffer.held if h.sort_key not in busy]
    if not waiting or now_ms < min(h.arrived_ms for h in waiting) + window_ms:
        return Release()
    ordered = tuple(sorted(waiting, key=lambda h: h.sort_key))
    watermark = buffer.released_up_to
    late = frozenset(
        h.sort_key for h in ordered if watermark is not None and h.sort_key < watermark
    )
    return Release(ordered, late)


def settle(buffer: ThreadBuffer, done: frozenset[SortKey], *, now_ms: int) -> ThreadBuffer:
    """The buffer without the ``done`` events, its watermark raised past them."""
    gone = [h.sort_key for h in buffer.held if h.sort_key in done]
    if not gone:
        return buffer
    marks = gone + ([buffer.released_up_to] if buffer.released_up_to else [])
    return replace(
        buffer,
        held=tuple(h for h in buffer.held if h.sort_key not in done),
        released_up_to=max(marks),
        updated_ms=now_ms,
    )


def ticks_due(
    due: set[int], ticking: dict[int, float], *, now: float, retick_s: float
) -> list[int]:
    """Partitions to send a tick to: due ones without a recent unseen tick.

    A tick can be lost to a rebalance (another worker reads it), so a tick unseen for
    ``retick_s`` is sent again; extra ticks only find nothing due.
    """
    return sorted(p for p in due if now - ticking.get(p, float("-inf")) >= retick_s)


def idle(buffer: ThreadBuffer, *, partition: int, now_ms: int, retention_ms: int) -> bool:
    """A thread of this partition with nothing held and no change within the retention."""
    return (
        buffer.partition == partition
        and not buffer.held
        and buffer.updated_ms < now_ms - retention_ms
    )

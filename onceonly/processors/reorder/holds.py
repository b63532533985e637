"""The ``holds`` table: each thread's reorder buffer, and which buffers hold events.

A delivery is held in its thread's buffer (a changelog-backed table, so it survives a
crash: its offset is committed once its hold is in the changelog). A tick releases the
buffers whose window has passed; the released events stay in the buffer until they are
processed (:meth:`Holds.settle`), so a crash mid-reply releases them again. Events being
processed are *busy*: a second release, or a reply that takes in newer messages of its
thread, skips them.

Each held event is an entry of its own (:func:`event_key`), written once when
it is held and deleted (a tombstone) when it is settled; the thread's own entry (its key)
keeps the release watermark. A write of one thread's whole buffer could be overwritten
by an older one: a worker paused past its session whose buffer write lands after the next
owner's, dropping the events that owner held and had acknowledged (the simulator's finding
F42); an event's own entry is only ever that event. Buffers written whole by an earlier
onceonly (events inside the thread's entry) are read and settled as before.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from onceonly.foundation import tracing
from onceonly.processors.records import KeyValues
from onceonly.processors.reorder import window as reorder
from onceonly.schemas.envelope import REPLAY_HEADER, Envelope


class Verdict(StrEnum):
    HELD = "held"
    REPEAT = "repeat"  #: that event is held already
    FULL = "full"  #: the buffer is at its size limit: process the delivery at once


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record of the deliveries topic as the pipeline processes it."""

    envelope: Envelope
    #: (partition, offset) of the record that carried it: the owner of its dedupe claim
    position: tuple[int, int]
    replay: bool = False
    late: bool = False
    #: its record's W3C trace context (onceonly.foundation.tracing), kept while it is held
    trace: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls, envelope: Envelope, position: tuple[int, int], headers: Mapping[str, bytes]
    ) -> Delivery:
        """The delivery a record carries: replayed or not, and its trace context."""
        return cls(
            envelope, position, REPLAY_HEADER in headers, trace=tracing.carrier(headers.items())
        )

    @property
    def sort_key(self) -> reorder.SortKey:
        return (int(self.envelope.occurred_at.timestamp() * 1000), self.envelope.event_id)


def log_ids(envelope: Envelope) -> dict[str, str]:
    """The ids every log line about an envelope carries."""
    return {
        "provider": envelope.provider,
        "event_id": envelope.event_id,
        "thread_key": envelope.thread_key,
    }


def _decode(raw: bytes) -> reorder.ThreadBuffer:
    return reorder.ThreadBuffer.from_json(json.loads(raw))


def _encode(buffer: reorder.ThreadBuffer) -> bytes:
    return json.dumps(buffer.to_json()).encode()


#: a held event's own entry begins with this byte, which no thread key does (a thread key
#: begins with its provider's name); then the thread key's length, the key and the event id
ENTRY = b"\x00"


def event_key(thread: bytes, event_id: str) -> bytes:
    """The entry of one held event of ``thread`` (any bytes in either: length-prefixed)."""
    return ENTRY + len(thread).to_bytes(4, "big") + thread + event_id.encode()


def entry_of(key: bytes) -> tuple[bytes, str] | None:
    """The thread and event id of a held event's entry; None for a thread's own entry."""
    if not key.startswith(ENTRY) or len(key) < 5:
        return None
    size = int.from_bytes(key[1:5], "big")
    return key[5 : 5 + size], key[5 + size :].decode("utf-8", "replace")


def thread_of(key: bytes) -> bytes:
    """The thread an entry of the holds table belongs to."""
    entry = entry_of(key)
    return key if entry is None else entry[0]


def _held_of(raw: bytes) -> reorder.Held:
    data = json.loads(raw)
    return reorder.Held((int(data["t"]), str(data["e"])), int(data["a"]), data["i"])


def _held_value(held: reorder.Held) -> bytes:
    at, event_id = held.sort_key
    return json.dumps({"t": at, "e": event_id, "a": held.arrived_ms, "i": held.item}).encode()


def _partition(held: reorder.Held) -> int:
    return int(held.item["position"][0])


#: a held event's write (key, value, partition) that returns what completes once the
#: changelog took it
Write = Callable[[bytes, bytes, int], Awaitable[object]]


class Entries(KeyValues, Protocol):
    """The holds table: entries are written, read, listed and deleted."""

    def __delitem__(self, key: bytes) -> None: ...


class Holds:
    """The reorder buffers of this worker's threads, over a table of bytes to bytes.

    With ``write`` (the worker's: ``FaustTable.write_soon``) a held event's entry is
    written through it, and :meth:`landing` gives what completes once the changelog took
    it: the delivery's record is acknowledged only then (``Lanes.ack_landed``). A hold
    whose write the broker failed, acknowledged, would be lost with the worker's store
    while its offset was committed (the simulator's finding F40). A repeat of a held event
    writes its entry again: a worker restarted on its own disk finds in its store an entry
    the changelog may never have taken."""

    def __init__(
        self, table: Entries, window_ms: int, max_bytes: int = 1 << 20, write: Write | None = None
    ) -> None:
        self.table, self._write = table, write  # with ``write``: an entry's landing kept
        self.window_ms = window_ms
        #: a thread's held entries past this in all are not held: processed at once
        self.max_bytes = max_bytes
        #: thread key -> its last held entry's write not yet handed on (:meth:`landing`)
        self._landing: dict[bytes, Awaitable[object]] = {}
        #: thread key -> partition of the buffers holding events; None: read the table
        self._index: dict[bytes, int] | None = None
        #: thread key -> when its oldest held event arrived (ms), beside the index: a tick
        #: finds the due threads without reading a buffer
        self._opened: dict[bytes, int] = {}
        #: thread key -> its held events' own entries, each with its size
        self._entries: dict[bytes, dict[bytes, int]] = {}
        #: threads whose own entry held events when the index was read (an earlier
        #: onceonly's whole buffer): only their entry is read for a repeat
        self._whole: set[bytes] = set()
        #: thread key -> sort keys of its events being processed now
        self._busy: dict[bytes, set[reorder.SortKey]] = {}

    def buffer(self, key: bytes) -> reorder.ThreadBuffer | None:
        """The thread's buffer: its own entry (the watermark, and events an earlier
        onceonly held in it) with its held events' entries."""
        return self._with_entries(key, self._own(key))

    def _own(self, key: bytes) -> reorder.ThreadBuffer | None:
        """The thread's own entry."""
        raw = self.table.get(key)
        return _decode(raw) if raw else None

    def _with_entries(
        self, key: bytes, base: reorder.ThreadBuffer | None
    ) -> reorder.ThreadBuffer | None:
        held = [_held_of(r) for e in self._held_entries(key) if (r := self.table.get(e))]
        if not held:
            return base
        if base is None:
            base = reorder.ThreadBuffer(partition=_partition(held[0]))
        return replace(base, held=(*base.held, *held))

    def _held_entries(self, key: bytes) -> list[bytes]:
        self.index()
        return list(self._entries.get(key, ()))

    def hold(self, delivery: Delivery, *, now_ms: int) -> Verdict:
        """Hold a delivery in its thread's buffer, unless it is held already (a repeat) or
        the thread's held entries would pass ``max_bytes`` (then it is processed at once)."""
        with tracing.hold(delivery.trace, delivery.envelope.event_id) as span:
            verdict = self._hold(delivery, now_ms)
            span.set("onceonly.verdict", verdict.value)
            return verdict

    def _hold(self, delivery: Delivery, now_ms: int) -> Verdict:
        envelope = delivery.envelope
        key = envelope.thread_key.encode()
        partition = delivery.position[0]
        entry = event_key(key, envelope.event_id)
        self.index()
        held_before = self.table.get(entry)
        if held_before is not None:
            self._put(key, entry, held_before, partition)  # the changelog may lack it
            return Verdict.REPEAT
        own = self._own(key) if key in self._whole else None  # an earlier onceonly's buffer
        if own is not None and any(h.sort_key == delivery.sort_key for h in own.held):
            return Verdict.REPEAT  # held by an earlier onceonly, in the thread's entry
        item = {
            "envelope": envelope.to_json(),
            "position": list(delivery.position),
            "replay": delivery.replay,
        }
        if delivery.trace:
            item["trace"] = dict(delivery.trace)
        value = _held_value(reorder.Held(delivery.sort_key, now_ms, item))
        entries = self._entries.setdefault(key, {})
        if sum(entries.values()) + len(value) > self.max_bytes:
            return Verdict.FULL
        self._put(key, entry, value, partition)
        entries[entry] = len(value)
        self.index()[key] = partition
        self._opened[key] = min(self._opened.get(key, now_ms), now_ms)
        return Verdict.HELD

    def _put(self, key: bytes, entry: bytes, value: bytes, partition: int) -> None:
        if self._write is None:
            self.table[entry] = value
        else:
            self._landing[key] = self._write(entry, value, partition)

    def landing(self, key: bytes) -> Awaitable[object] | None:
        """What completes once the thread's last held entry written is in the changelog
        (None: nothing written through ``write`` since the last call)."""
        return self._landing.pop(key, None)

    # -- the index of buffers that hold events ------------------------------------
    def index(self) -> dict[bytes, int]:
        """Thread key -> partition of every buffer that holds events, kept in memory.

        A thread's own entry outlives its events (it keeps the release watermark for as
        long as the dedupe retention), so ticks look only at these keys instead of
        reading the whole table. Read from the table after each rebalance's recovery.
        """
        if self._index is None:
            self._index, self._opened, self._entries, self._whole = {}, {}, {}, set()
            for name, raw in self.table.items():
                key = bytes(name)
                entry = entry_of(key)
                if entry is not None:
                    thread, held = entry[0], _held_of(raw)
                    self._entries.setdefault(thread, {})[key] = len(raw)
                    self._note(thread, _partition(held), held.arrived_ms)
                    continue
                buffer = _decode(raw)
                if buffer.held:
                    self._whole.add(key)
                    self._note(key, buffer.partition, buffer.opened_ms or 0)
        return self._index

    def _note(self, key: bytes, partition: int, arrived_ms: int) -> None:
        assert self._index is not None
        self._index[key] = partition
        self._opened[key] = min(self._opened.get(key, arrived_ms), arrived_ms)

    def forget(self) -> None:
        """The partitions changed: read the held buffers from the table again."""
        self._index = None
        self._busy.clear()
        self._landing.clear()

    def _unindex(self, key: bytes) -> None:
        self.index().pop(key, None)
        self._opened.pop(key, None)
        self._entries.pop(key, None)

    def _window_passed(self, key: bytes, now_ms: int) -> bool:
        return self._opened.get(key, now_ms) + self.window_ms <= now_ms

    def due_keys(
        self, partition: int, *, now_ms: int, skip: Collection[bytes] = ()
    ) -> Iterator[bytes]:
        """Threads of ``partition`` with events not busy whose window has passed, one at a
        time (the caller may wait between them). Decided from the index: a buffer is read
        only when some of its events are busy, never for a thread merely waiting."""
        for key, p in list(self.index().items()):
            if p != partition or key in skip or not self._window_passed(key, now_ms):
                continue
            if key not in self._busy:
                yield key
                continue
            buffer = self.buffer(key)
            if buffer is None or not buffer.held:
                self._unindex(key)
                continue
            busy = frozenset(self._busy.get(key, ()))
            if reorder.take(buffer, now_ms=now_ms, window_ms=self.window_ms, busy=busy).events:
                yield key

    def due_partitions(self, *, now_ms: int) -> set[int]:
        """Partitions (of this worker) holding a buffer whose window has passed (from the
        index alone: no buffer is read)."""
        return {p for key, p in self.index().items() if self._window_passed(key, now_ms)}

    # -- releasing ------------------------------------------------------------------
    def take(
        self,
        key: bytes,
        *,
        now_ms: int,
        window_ms: int | None = None,
    ) -> list[Delivery]:
        """The thread's held events to process now (marked busy), oldest first."""
        buffer = self.buffer(key)
        if buffer is None:
            return []
        busy = frozenset(self._busy.get(key, ()))
        window = self.window_ms if window_ms is None else window_ms
        out = reorder.take(buffer, now_ms=now_ms, window_ms=window, busy=busy)
        if out.events:
            self._busy.setdefault(key, set()).update(h.sort_key for h in out.events)
        return [
            Delivery(
                Envelope.from_json(h.item["envelope"]),
                (int(h.item["position"][0]), int(h.item["position"][1])),
                bool(h.item.get("replay")),
                h.sort_key in out.late,
                tuple(h.item.get("trace", {}).items()),
            )
            for h in out.events
        ]

    def settle(self, key: bytes, done: list[Delivery], *, now_ms: int) -> None:
        """Processed: out of the buffer (read again now, it may have grown meanwhile): each
        event's own entry deleted, the thread's entry keeping the watermark past them."""
        keys = frozenset(d.sort_key for d in done)
        self.release_busy(key, done)
        own = self._own(key)
        buffer = self._with_entries(key, own)
        if buffer is None:
            return
        settled = reorder.settle(buffer, keys, now_ms=now_ms)
        if settled is buffer:
            return
        entries = self._entries.get(key, {})
        for delivery in done:
            entry = event_key(key, delivery.envelope.event_id)
            if entries.pop(entry, None) is not None:
                del self.table[entry]
        earlier = own.held if own is not None else ()  # held by an earlier onceonly
        left = tuple(h for h in earlier if h.sort_key not in keys)
        self.table[key] = _encode(replace(settled, held=left))
        if not settled.held:
            self._unindex(key)
        else:
            self._opened[key] = settled.opened_ms or now_ms

    def release_busy(self, key: bytes, taken: list[Delivery]) -> None:
        """These events are no longer busy: processed, or dropped (released again later)."""
        busy = self._busy.get(key)
        if busy is not None:
            busy.difference_update(d.sort_key for d in taken)
            if not busy:
                del self._busy[key]

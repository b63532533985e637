"""The ``holds`` table: each thread's reorder buffer, and which buffers hold events.

A delivery is held in its thread's buffer (a changelog-backed table, so it survives a
crash: its offset is committed once it is there). A tick releases the buffers whose
window has passed; the released events stay in the buffer until they are processed
(:meth:`Holds.settle`), so a crash mid-reply releases them again. Events being
processed are *busy*: a second release, or a reply that takes in newer messages of its
thread, skips them.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from dataclasses import dataclass
from enum import StrEnum

from processors import reorder
from schemas.envelope import Envelope


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


class Holds:
    """The reorder buffers of this worker's threads, over a table of bytes to bytes."""

    def __init__(
        self, table: MutableMapping[bytes, bytes], window_ms: int, max_bytes: int = 1 << 20
    ) -> None:
        self.table = table
        self.window_ms = window_ms
        #: a buffer's record past this would be refused by the broker: hold no more in it
        self.max_bytes = max_bytes
        #: thread key -> partition of the buffers holding events; None: read the table
        self._index: dict[bytes, int] | None = None
        #: thread key -> sort keys of its events being processed now
        self._busy: dict[bytes, set[reorder.SortKey]] = {}

    def buffer(self, key: bytes) -> reorder.ThreadBuffer | None:
        raw = self.table.get(key)
        return _decode(raw) if raw else None

    def hold(self, delivery: Delivery, *, now_ms: int) -> Verdict:
        """Hold a delivery in its thread's buffer, unless it is held already (a repeat) or
        the buffer's record would pass ``max_bytes`` (then it is processed at once)."""
        envelope = delivery.envelope
        key = envelope.thread_key.encode()
        partition = delivery.position[0]
        buffer = self.buffer(key) or reorder.ThreadBuffer(partition=partition)
        item = {
            "envelope": envelope.to_json(),
            "position": list(delivery.position),
            "replay": delivery.replay,
        }
        updated = reorder.hold(buffer, reorder.Held(delivery.sort_key, now_ms, item))
        if updated is buffer:
            return Verdict.REPEAT
        value = _encode(updated)
        if len(value) > self.max_bytes:
            return Verdict.FULL
        self.table[key] = value
        self.index()[key] = partition
        return Verdict.HELD

    # -- the index of buffers that hold events ------------------------------------
    def index(self) -> dict[bytes, int]:
        """Thread key -> partition of every buffer that holds events, kept in memory.

        A ``holds`` entry outlives its events (it keeps the thread's release watermark
        for as long as the dedupe retention), so ticks look only at these keys instead of
        decoding the whole table. Read from the table after each rebalance's recovery.
        """
        if self._index is None:
            self._index = {}
            for key, raw in self.table.items():
                buffer = _decode(raw)
                if buffer.held:
                    self._index[bytes(key)] = buffer.partition
        return self._index

    def forget(self) -> None:
        """The partitions changed: read the held buffers from the table again."""
        self._index = None
        self._busy.clear()

    def due_keys(self, partition: int, *, now_ms: int) -> list[bytes]:
        """Threads of ``partition`` with events not busy whose window has passed."""
        due: list[bytes] = []
        index = self.index()
        for key in [k for k, p in index.items() if p == partition]:
            buffer = self.buffer(key)
            if buffer is None or not buffer.held:
                index.pop(key, None)
                continue
            if self.take(key, now_ms=now_ms, buffer=buffer, mark=False):
                due.append(key)
        return due

    def due_partitions(self, *, now_ms: int) -> set[int]:
        """Partitions (of this worker) holding a buffer whose window has passed."""
        due: set[int] = set()
        for key, partition in list(self.index().items()):
            if partition in due:
                continue
            buffer = self.buffer(key)
            if buffer is not None and reorder.due(buffer, now_ms=now_ms, window_ms=self.window_ms):
                due.add(buffer.partition)
        return due

    # -- releasing ------------------------------------------------------------------
    def take(
        self,
        key: bytes,
        *,
        now_ms: int,
        window_ms: int | None = None,
        buffer: reorder.ThreadBuffer | None = None,
        mark: bool = True,
    ) -> list[Delivery]:
        """The thread's held events to process now (marked busy), oldest first."""
        buffer = buffer or self.buffer(key)
        if buffer is None:
            return []
        busy = frozenset(self._busy.get(key, ()))
        window = self.window_ms if window_ms is None else window_ms
        out = reorder.take(buffer, now_ms=now_ms, window_ms=window, busy=busy)
        if mark and out.events:
            self._busy.setdefault(key, set()).update(h.sort_key for h in out.events)
        return [
            Delivery(
                Envelope.from_json(h.item["envelope"]),
                (int(h.item["position"][0]), int(h.item["position"][1])),
                bool(h.item.get("replay")),
                h.sort_key in out.late,
            )
            for h in out.events
        ]

    def settle(self, key: bytes, done: list[Delivery], *, now_ms: int) -> None:
        """Processed: out of the buffer (read again now, it may have grown meanwhile)."""
        keys = frozenset(d.sort_key for d in done)
        self.release_busy(key, done)
        buffer = self.buffer(key)
        if buffer is None:
            return
        settled = reorder.settle(buffer, keys, now_ms=now_ms)
        if settled is not buffer:
            self.table[key] = _encode(settled)
        if not settled.held:
            self.index().pop(key, None)

    def release_busy(self, key: bytes, taken: list[Delivery]) -> None:
        """These events are no longer busy: processed, or dropped (released again later)."""
        busy = self._busy.get(key)
        if busy is not None:
            busy.difference_update(d.sort_key for d in taken)
            if not busy:
                del self._busy[key]

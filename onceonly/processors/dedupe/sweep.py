"""Expiry: dedupe entries older than their provider's retention go, in slices, with
tombstones."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from onceonly.processors.dedupe import decisions as dedupe
from onceonly.processors.records import SweepPasses, Table, own_slice
from onceonly.processors.reorder import window as reorder
from onceonly.processors.reorder.holds import entry_of
from onceonly.schemas.ledger import EventEntry

log = structlog.get_logger("onceonly.sweep")


@dataclass
class Sweeper:
    """Sweeps each partition's expired dedupe entries, a slice per record received.

    A pass starts every ``every_s`` (the first one a whole interval after a start or a
    rebalance) and reads the partition's own store ``slice`` entries at a time, one slice
    per record the partition receives, so a store of a million entries never blocks the
    event loop for more than a few milliseconds.
    """

    events: Table  #: the ``events`` table: dedupe entries
    holds: Table  #: the ``holds`` table
    retention: dedupe.Retention
    clock: Callable[[], float]
    every_s: float = 600.0
    slice: int = 5000
    _passes: SweepPasses = field(default_factory=SweepPasses)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def maybe_sweep(self, partition: int) -> None:
        due, after = self._passes.next_slice(partition, self.clock(), self.every_s)
        if due:
            self._passes.slice_read(partition, self.sweep(partition, after=after))

    def sweep(self, partition: int, after: bytes | None = None) -> bytes | None:
        """Delete expired dedupe entries of one slice of this partition (with tombstones).

        Returns the last key read, to go on from, or None once the partition is done.
        """
        entries = own_slice(self.events, partition, after, self.slice)
        mine = [(key, EventEntry.from_json(json.loads(raw))) for key, raw in entries]
        old = list(dedupe.expired(mine, now_ms=self.now_ms(), retention=self.retention))
        for key in old:
            del self.events[key]
        if old:
            log.info("dedupe entries expired", partition=partition, count=len(old))
        if len(entries) >= self.slice:
            return entries[-1][0]
        # the pass is over: threads idle for as long keep only a release watermark
        idle = [
            key
            for key, raw in self.holds.items()
            if entry_of(key) is None  # a held event's own entry: settled, not swept
            and reorder.idle(
                reorder.ThreadBuffer.from_json(json.loads(raw)),
                partition=partition,
                now_ms=self.now_ms(),
                retention_ms=self.retention.for_key(key),
            )
        ]
        for key in idle:
            del self.holds[key]
        return None

"""The events table (dedupe) in the simulated world: the changelog's state, shared, and each
member's store of it, written as faust writes a table.

A member's write goes into its store at once and reaches the changelog later, sent by its
producer in the order written: each write leaves after the previous one landed and lands
after a broker latency (from a generator of its own, so the world's other draws are the
ones they were). A paused member's writes leave once it resumes (they may land after the
next owner's); a killed member's unsent writes are lost. A member reads its store: what
its last assignment recovered from the changelog, and its own writes since; never another
member's writes after its recovery.

Every delivery a member takes is claimed in it with the product's dedupe
(:func:`~onceonly.processors.dedupe.decisions.decide`): an original webhook's (its
``agentmail:<event_id>`` key at its offset) as well as a resent record's
(:mod:`testkit.sim.letters`). A webhook delivered again (``redeliver``, a provider's retry)
is a duplicate while its first delivery's claim or outcome is in the member's store, and
taken as new where it is not (the ledger then decides).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from onceonly.processors.dedupe import decisions as dedupe
from onceonly.processors.records import applied_after_write
from onceonly.schemas.ledger import EventEntry
from testkit.sim.io import KAFKA, Killed, current, remote

if TYPE_CHECKING:
    from testkit.sim.member import Member
    from testkit.sim.world import World


class Changelog:
    """A table's changelog (the events table's; the holds table's, :mod:`testkit.sim.holding`):
    its records in order (never compacted); ``salt`` gives each its own latency generator."""

    def __init__(self, seed: int, salt: int = 61) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.rng = random.Random(seed * 8069 + salt)

    def latency(self) -> float:
        return self.rng.uniform(0.001, 0.02)

    def land(self, key: bytes, value: bytes | None) -> int:
        """A record appended (None: a tombstone); its offset."""
        self.records.append((key, value))
        return len(self.records) - 1

    @property
    def state(self) -> dict[bytes, bytes]:
        """The latest value of each key, as a store recovered from every record holds it."""
        latest: dict[bytes, bytes] = {}
        for key, value in self.records:
            _apply(latest, key, value)
        return latest


class EventsStore:
    """One member's store of a table (a ``KeyValues``: ``get``, ``[]=`` and ``items``): the
    events table's, or over ``log`` another's (the holds table's)."""

    def __init__(
        self,
        world: World,
        member: Member,
        log: Changelog | None = None,
        what: str = "an events-table write",
    ) -> None:
        self.world = world
        self.member = member
        self.log: Changelog = world.event_log if log is None else log
        self.what = what  #: a write of it, as the trace names one
        self.store: dict[bytes, bytes] = {}
        #: the changelog offset its next recovery reads after (faust's persisted offset,
        #: moved past an own write as ``ContiguousTable`` moves it)
        self.applied = -1
        self._unsent: list[tuple[bytes, bytes | None, asyncio.Future[bool]]] = []
        self._sender: asyncio.Task[None] | None = None

    def recover(self) -> None:
        """An assignment: the changelog's records after :attr:`applied` applied over the
        store, as faust recovers a RocksDB store from its persisted offset. What the store
        held stays where no later record changed it: a write of its own that the broker
        lost, and its writes not yet landed (they are in its RocksDB)."""
        store = self.store
        for key, value in self.log.records[self.applied + 1 :]:
            _apply(store, key, value)
        for key, value, _ in self._unsent:
            _apply(store, key, value)
        self.applied = len(self.log.records) - 1

    def get(self, key: bytes) -> bytes | None:
        return self.store.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.store.items()))

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.write(key, value)

    def __delitem__(self, key: bytes) -> None:
        self.write(key, None)  # a tombstone

    def write(self, key: bytes, value: bytes | None) -> asyncio.Future[bool]:
        """Write ``key`` (None: delete it): into the store at once, to the changelog after
        the writes before it; the future says whether it landed (False: lost while writes
        expired)."""
        if value is None:
            self.store.pop(key, None)
        else:
            self.store[key] = value
        landed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._unsent.append((key, value, landed))
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send())
        return landed

    async def _send(self) -> None:
        current.set(self.member)
        try:
            while self._unsent:
                key, value, landed = self._unsent[0]
                latency = self.log.latency()
                put = self.world.broker.table_write(self._put(key, value), self.what)
                landed.set_result(await remote(latency, put, 0.0, KAFKA))
                self._unsent.pop(0)
        except Killed:
            self._unsent.clear()
        finally:
            self._sender = None

    def _put(self, key: bytes, value: bytes | None) -> Callable[[], None]:
        def put() -> None:
            self.applied = applied_after_write(self.applied, self.log.land(key, value))

        return put


def _apply(store: dict[bytes, bytes], key: bytes, value: bytes | None) -> None:
    if value is None:
        store.pop(key, None)
    else:
        store[key] = value


def entry_of(store: EventsStore | Mapping[bytes, bytes], key: bytes) -> EventEntry | None:
    """``key``'s entry in a member's store, or in the changelog's state."""
    raw = store.get(key)
    return EventEntry.from_json(json.loads(raw)) if raw else None


def claim_original(
    store: EventsStore, event_id: str, offset: int, now_ms: int, read_from: int | None = None
) -> str | None:
    """An original webhook's delivery at ``offset`` claimed as the worker claims it: None
    (taken, its claim written) or the verdict it is skipped with (``read_from``: the
    member's first offset since its assignment, as ``dedupe.stale`` reads it)."""
    key = f"agentmail:{event_id}".encode()
    entry = entry_of(store, key)
    decision = dedupe.decide(entry, position=(0, offset), now_ms=now_ms, read_from=read_from)
    if decision.skip:
        return decision.verdict.value
    assert decision.entry is not None
    store[key] = json.dumps(decision.entry.to_json()).encode()
    return None


def finish_original(
    store: EventsStore,
    event_id: str,
    offset: int,
    succeeded: bool,
    now_ms: int,
    read_from: int | None = None,
) -> None:
    """An original's entry as the worker's table would hold it: an original read again
    that its dedupe would skip (succeeded or failed before) leaves its entry alone."""
    key = f"agentmail:{event_id}".encode()
    entry = entry_of(store, key)
    if dedupe.decide(entry, position=(0, offset), now_ms=now_ms, read_from=read_from).skip:
        return
    finished = dedupe.finished(succeeded, position=(0, offset), now_ms=now_ms)
    store[key] = json.dumps(finished.to_json()).encode()

"""The reorder window in the simulated world: a member's ``holds`` table, as the router
holds deliveries with a window (``ONCEONLY_REORDER_WINDOW_MS`` above 0).

What runs is the product's :class:`~onceonly.processors.reorder.holds.Holds` over a store
of its own changelog (an :class:`~testkit.sim.events.EventsStore` over the world's
``hold_log``: written at once, landed after a broker latency, lost as the events table's
writes are while writes expire, recovered at each assignment). As the router does:

- a delivery (a webhook, a retry's or a catch-up's record with a valid MAC) is held in its
  thread's buffer, and its offset is done once its hold landed in the changelog
  (``Lanes.ack_landed``; a hold lost while writes expire makes the member exit, to read
  the record again: finding F40); a repeat of a held event is skipped at once, a retry's
  dead-lettered again (``retry_raced``); a decision on a draft and a record without a
  valid MAC go to the thread's lane at once;
- a tick every quarter of the window (``lifecycle``'s timer) queues a release on the lane of
  each thread due (:meth:`Holds.due_keys`); the release takes the thread's events
  (:meth:`Holds.take`), the lane answers them, and they are settled out of the buffer
  (:meth:`Holds.settle`); a reply being written takes in what else of its thread is held
  (window 0, ``Conversation.process``'s ``newer``);
- a rebalance forgets what is busy; an assignment recovers the table.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.reorder.holds import Delivery, Holds, Verdict
from onceonly.processors.runtime.broker_errors import changelog_write
from onceonly.processors.writer.contract import Inbound
from onceonly.schemas.envelope import Envelope, has_valid_mac
from testkit.sim.broker import expiry
from testkit.sim.events import EventsStore
from testkit.sim.io import Killed, current
from testkit.sim.letters import KEY, Item, Resent

if TYPE_CHECKING:
    from testkit.sim.member import Member


#: a test's switch: the world before finding F40 was fixed, a held delivery acknowledged at
#: once and its offset committed once its hold left the member, landed or lost (faust
#: flushes its producer before a commit, and no one awaited the hold's write)
IGNORE_LOST_HOLDS = False


async def _landed(write: Awaitable[bool]) -> None:
    if not await write:
        with changelog_write("holds"):
            raise expiry()


@dataclass(frozen=True, slots=True)
class Release:
    """A tick's release of a thread's held events, queued on its lane."""

    key: bytes


class Holding:
    """One member's holds table and its tick timer."""

    def __init__(self, member: Member, window_ms: int) -> None:
        self.member = member
        self.world = member.world
        self.store = EventsStore(self.world, member, self.world.hold_log, "a holds-table write")
        self.holds = Holds(self.store, window_ms, write=self._write)
        self.interval_s = max(0.05, window_ms / 4000)
        #: threads with a release queued or running on their lane (the router's)
        self.releasing: set[bytes] = set()
        #: acknowledgements waiting for their hold to land
        self._acks: set[asyncio.Task[None]] = set()
        #: thread key -> the held deliveries a reply took in (settled with its release)
        self._absorbed: dict[bytes, list[Delivery]] = {}
        self._woken = asyncio.Event()
        #: when the deliveries held here fall due (ms), earliest first
        self._due: list[int] = []
        self._ticker = asyncio.get_running_loop().create_task(self._ticks())

    def _now_ms(self) -> int:
        return int(self.world.loop.time() * 1000)

    # -- the group -------------------------------------------------------------------

    def recover(self) -> None:
        """An assignment: the table from its changelog (and this member's own writes); what
        it holds is due within a window."""
        self.store.recover()
        self.forget()
        heapq.heappush(self._due, self._now_ms() + self.holds.window_ms)
        self._woken.set()

    def forget(self) -> None:
        """The partitions changed: nothing is busy or releasing; no offset waits here."""
        self.holds.forget()
        self.releasing.clear()
        self._absorbed.clear()

    def holding(self) -> bool:
        return bool(self.holds.index())

    def stop(self) -> None:
        """The member died: its timer with it."""
        self._ticker.cancel()

    # -- deliveries ------------------------------------------------------------------

    def takes(self, item: Item) -> bool:
        """Whether the router holds ``item`` (a decision, or a record without a valid MAC,
        goes to its lane at once)."""
        if isinstance(item, Resent):
            return has_valid_mac(item.resend.value, item.resend.headers(), KEY)
        return isinstance(item, Inbound)

    def hold(self, offset: int, item: Inbound | Resent) -> None:
        """Hold the delivery at ``offset`` (``Router._hold``): done once its hold landed."""
        member = self.member
        envelope = self.world.letters.envelope(item)
        replay = isinstance(item, Resent) and item.replay
        delivery = Delivery(envelope, (0, offset), replay)
        verdict = self.holds.hold(delivery, now_ms=self._now_ms())
        key = envelope.thread_key.encode()
        landing = self.holds.landing(key)  # held, or held already (written again)
        if verdict is Verdict.REPEAT:
            self.world.trace(member.name, f"delivery {offset} of {envelope.event_id} held already")
            if replay:  # as the router: the retry ends as its letter said
                asyncio.get_running_loop().create_task(self._raced(envelope))
        else:
            self.world.trace(member.name, f"held {envelope.event_id} ({offset})")
            heapq.heappush(self._due, self._now_ms() + self.holds.window_ms)
            self._woken.set()
        if landing is None:
            member.commit()  # acknowledged at once: its offset is done
            return
        member.open[offset] = None
        task = asyncio.get_running_loop().create_task(self._landed(offset, landing))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _raced(self, envelope: Envelope) -> None:
        """A retry of an event held already, dead-lettered again; a letter the broker did
        not take ends the worker (``admit_or_exit``)."""
        current.set(self.member)
        why = "the retry reached the worker while its event was held for its window"
        try:
            await self.world.letters.raced(envelope, why)
        except BrokerUnavailable as exc:
            self.member.fatal(exc)

    async def _landed(self, offset: int, landing: Awaitable[None]) -> None:
        """``Lanes.ack_landed``: the offset done once the hold landed; its loss is fatal."""
        member = self.member
        current.set(member)
        try:
            await landing
        except BrokerUnavailable as exc:
            if not IGNORE_LOST_HOLDS:
                member.fatal(exc)
                return
        member.open.pop(offset, None)
        member.commit()

    def _write(self, key: bytes, value: bytes, partition: int) -> Awaitable[None]:
        """A hold's write, as ``FaustTable.write_soon`` makes it: into the store now, and
        what completes once the changelog took it."""
        return _landed(self.store.write(key, value))

    # -- ticks and releases ----------------------------------------------------------

    async def _ticks(self) -> None:
        """The tick timer, every ``interval_s`` while a thread is due and not releasing (as
        ``lifecycle``'s); it sleeps through the ticks that would find nothing to release:
        until a delivery held here falls due, or a hold, a release's end or an assignment."""
        member = self.member
        current.set(member)
        loop = asyncio.get_running_loop()
        try:
            while not member.dead:
                self._woken.clear()
                wait = self._until_due()
                alarm = None if wait is None else loop.call_later(wait, self._woken.set)
                await self._woken.wait()
                if alarm is not None:
                    alarm.cancel()
                await member.awake()
                if member.owns():
                    self._tick()
        except Killed:
            return

    def _until_due(self) -> float | None:
        """Seconds to the next tick (None: none until woken, as a member that does not own
        the partition)."""
        if not self.member.owns():
            return None
        now = self._now_ms()
        if next(self.holds.due_keys(0, now_ms=now, skip=self.releasing), None) is not None:
            return self.interval_s
        due = self._due
        while due and due[0] <= now:
            heapq.heappop(due)
        return (due[0] - now) / 1000 if due else None

    def _tick(self) -> None:
        """Queue a release on the lane of each due thread (``Router.on_tick``)."""
        for key in self.holds.due_keys(0, now_ms=self._now_ms(), skip=self.releasing):
            self.releasing.add(key)
            self.member.queue_release(key.decode(), Release(key))

    def taken(self, key: bytes) -> list[tuple[int, Item]]:
        """A release's events (marked busy), oldest first, as the lane's batch."""
        deliveries = self.holds.take(key, now_ms=self._now_ms())
        self._absorbed[key] = list(deliveries)
        return self._batch(deliveries)

    def newer(self, key: bytes, approval: bool) -> list[tuple[int, Item]]:
        """What else of the thread is held, for the reply being written (window 0); with
        approval on, a retry's record is left for a release of its own (F15)."""
        held = self.holds.take(key, now_ms=self._now_ms(), window_ms=0)
        left = [d for d in held if approval and d.replay]
        self.holds.release_busy(key, left)
        fresh = [d for d in held if d not in left]
        self._absorbed.setdefault(key, []).extend(fresh)
        return self._batch(fresh)

    def leave(self, key: bytes, offsets: Sequence[int]) -> None:
        """Taken in but not answered by this reply (the ledger has them): released again."""
        absorbed = self._absorbed.get(key, [])
        back = [d for d in absorbed if d.position[1] in offsets]
        self._absorbed[key] = [d for d in absorbed if d not in back]
        self.holds.release_busy(key, back)

    def settle(self, key: bytes) -> None:
        """A release answered: its events out of the buffer."""
        done = self._absorbed.pop(key, [])
        self.holds.settle(key, done, now_ms=self._now_ms())

    def drop(self, key: bytes) -> None:
        """A release that did not finish: its events stay held, not busy."""
        self.holds.release_busy(key, self._absorbed.pop(key, []))

    def ended(self, key: bytes) -> None:
        """A release ended (``Router._release``'s ``finally``): its thread may be due again."""
        self.releasing.discard(key)
        self._woken.set()

    def _batch(self, deliveries: Sequence[Delivery]) -> list[tuple[int, Item]]:
        part = self.world.part
        return [(d.position[1], part.deliveries[d.position[1]]) for d in deliveries]

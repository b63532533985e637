"""One member of the consumer group: a worker process with its lanes, its fence and its
view of the shared ledger partition."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onceonly.processors.approval import applying
from onceonly.processors.approval.decisions import Answer
from onceonly.processors.conversation import RECORD_ATTEMPTS, tried
from onceonly.processors.exceptions import BrokerUnavailable, Rebalancing, ThreadUnread
from onceonly.processors.fence import Fence, Position, Rounds
from onceonly.processors.flow.admission import Admission
from onceonly.processors.lanes import Dropped
from onceonly.processors.reply.bursts import distinct, ended_failed
from onceonly.processors.reply.late_sends import LateSends
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.reply.once import (
    Outcome,
    reply_once,
    send_recorded,
)
from onceonly.processors.writer.contract import Inbound
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.approval import ApprovalDecision
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.sim.approvals import unchecked_decide, worker_parts
from testkit.sim.audit import audits, take_overs
from testkit.sim.events import EventsStore
from testkit.sim.holding import Holding, Release
from testkit.sim.io import KAFKA, Actor, Killed, current, remote
from testkit.sim.letters import Item
from testkit.sim.log import (
    DRAIN_GRACE_S,
    LATE_SEND_CHECK_S,
    TP,
    LateLedger,
    SimTable,
    position,
)
from testkit.sim.mail import MemberMail
from testkit.sim.reply_parts import messages_of, reply_parts

if TYPE_CHECKING:
    from testkit.sim.world import World


@dataclass
class _Lane:
    task: asyncio.Task[None] | None = None
    queue: list[tuple[int, Item | Release]] = field(default_factory=list)
    recorded: list[ReplyRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Disk:
    """A worker's local state as a restart on the same host finds it: each table's store
    (its RocksDB) and the changelog offset its next recovery reads after, for the ledger,
    the events table and the holds table (with a reorder window)."""

    stores: tuple[tuple[dict[bytes, bytes], int], ...]


class Member(Actor):
    """One worker process in the group (a restart is a new Member, on a new host or on the
    disk of the one it replaces)."""

    def __init__(self, world: World, name: str, disk: Disk | None = None) -> None:
        super().__init__(name)
        self.world = world
        self.generation = -1
        self.table = SimTable(world.part, world, self)
        #: its store of the events table (dedupe), recovered at each assignment
        self.events = EventsStore(world, self)
        self.fence = Fence(self._confirm, self._current)
        self._rounds: Rounds[Any, bool] = Rounds(self._ask)
        ledger_type = LateLedger if world.bugs.ledger_after_send else TableLedger
        self.ledger = ledger_type(
            self.table, fence=self.fence.check, read_log=self._read_log, clock=world.now
        )
        self.ledger.take_overs = take_overs(self)
        loop = asyncio.get_running_loop()
        #: its replies recorded failed with their sends' outcomes unknown (read on its audit)
        self.late_sends = LateSends(
            LATE_SEND_CHECK_S, loop.time, self.table.partition_of, wall=world.now, store=self.table
        )
        # its take-overs find the replies a last owner recorded failed, read as its sends are
        mail = MemberMail(world.mail, self.owns)
        self.ledger.on_taken = functools.partial(self.late_sends.taken, sender_of=lambda _: mail)
        self.writer = Writer(
            world.model,
            WriterPolicy(timeout_s=120.0, attempts=3),
            admission=Admission(16, clock=loop.time),
        )
        self.lanes: dict[str, _Lane] = {}
        self.open: dict[int, None] = {}
        self.fetched = 0
        self.read_from: int | None = None
        #: armed: let this many checks pass, then pause this long right after the next
        self.pause_at_confirm: tuple[int, float] | None = None
        #: armed: pause this long right after its next *pending* record lands
        self.pause_after_write: float | None = None
        #: what the product's approval code reaches of the worker (approval schedules)
        self.parts: Any = worker_parts(self) if world.operator is not None else None
        #: the partition's end at this member's last ledger audit (the world is busy
        #: until its owner has audited past its last record)
        self.audited = -1
        self._auditor = loop.create_task(audits(self))
        #: its holds table, with a reorder window (testkit.sim.holding)
        window = world.schedule.window_ms
        self.holding = Holding(self, window) if window else None
        if disk is not None:
            for table, (store, applied) in zip(self._tables(), disk.stores, strict=True):
                table.store, table.applied = dict(store), applied

    def _tables(self) -> list[SimTable | EventsStore]:
        tables: list[SimTable | EventsStore] = [self.table, self.events]
        return tables if self.holding is None else [*tables, self.holding.store]

    def disk(self) -> Disk:
        """Its tables' stores as they are on its disk now (a kill: its unsent writes in them)."""
        return Disk(tuple((dict(t.store), t.applied) for t in self._tables()))

    # -- the group -------------------------------------------------------------------

    def owns(self) -> bool:
        part = self.world.part
        return not self.dead and part.owner is self and part.generation == self.generation

    def _current(self) -> Position | None:
        return position.get()

    async def _confirm(self, tp: Any, generation: int) -> bool:
        if generation != self.generation:
            return False
        return await self._rounds(tp) and generation == self.generation

    async def _ask(self, tp: Any) -> bool:
        generation = self.generation

        def coordinator() -> bool:
            part = self.world.part
            ok = part.owner is self and part.generation == generation and not self.dead
            armed = self.pause_at_confirm
            if ok and armed is not None:  # the pause falls after the check
                if armed[0] > 0:
                    self.pause_at_confirm = (armed[0] - 1, armed[1])
                else:
                    self.pause_at_confirm = None
                    self.world.pause(self, armed[1])
            return ok

        latency = self.world.broker_latency
        try:
            return await remote(latency(), coordinator, latency(), KAFKA)
        except Killed:
            return False  # a dead member's round: its lanes are cancelled

    async def _read_log(
        self, partition: int, first: int, last: int
    ) -> Sequence[tuple[int, bytes, bytes | None]]:
        def read() -> list[tuple[int, bytes, bytes | None]]:
            return self.world.part.entries(first, last)  # what compaction left

        latency = self.world.broker_latency
        return await remote(latency(), self.world.broker.when_up(read), latency(), KAFKA)

    def assign(self, generation: int) -> None:
        """The partition is this member's in ``generation``: recover, reconcile what is
        pending, read the deliveries again from the committed offset."""
        self.generation = generation
        for lane in self.lanes.values():  # a drain ended before the member rejoined
            if lane.task is not None:
                lane.task.cancel()
        self.lanes = {}
        self.ledger.forget()
        self.table.recover()
        self.events.recover()
        if self.holding is not None:
            self.holding.recover()
        self.open = {}
        #: the first offset read since this assignment (as OffsetBook.first: dedupe.stale)
        self.fetched = self.read_from = self.world.part.committed
        for raw in list(self.table.store.values()):
            try:
                record = self.world.part.record(raw)
            except Exception:
                continue
            # as the worker: an approved draft is sent on its own (approval/applying.py);
            # any other pending reply is finished with its burst when its messages are read
            # again from the committed offset (bursts.py, Plan.RECONCILE)
            if record.state is ReplyState.PENDING and record.approval is not None:
                self._lane(record.thread_key).recorded.append(record)
        self.world.trace(self.name, f"assigned generation {generation}")
        self.fetch()

    def revoke(self) -> None:
        """The partition is gone: queued work is dropped; running lanes get the grace."""
        self.ledger.forget()
        if self.holding is not None:
            self.holding.forget()
        for lane in self.lanes.values():
            lane.queue.clear()
            lane.recorded.clear()
        running = [lane.task for lane in self.lanes.values() if lane.task is not None]
        if running:
            loop = asyncio.get_running_loop()
            loop.call_later(DRAIN_GRACE_S, lambda: [t.cancel() for t in running])
        self.world.trace(self.name, f"revoked (generation {self.generation})")

    def fetch(self) -> None:
        if not self.owns() or self.paused or self.cut_for(KAFKA):
            return
        part = self.world.part
        holding = self.holding
        while self.fetched < len(part.deliveries):
            offset = self.fetched
            message = part.deliveries[offset]
            self.fetched += 1
            if holding is not None and holding.takes(message):
                holding.hold(offset, message)  # type: ignore[arg-type]
            else:
                self.open[offset] = None
                self._lane(message.thread_key).queue.append((offset, message))
        for key in list(self.lanes):
            self._start(key)

    def holds_any(self) -> bool:
        """Whether its holds table holds a delivery (the world is busy until released)."""
        return self.holding is not None and self.holding.holding()

    def queue_release(self, thread_key: str, release: Release) -> None:
        """A tick's release of a due thread, queued on its lane (``Router.on_tick``)."""
        self._lane(thread_key).queue.append((-1, release))
        self._start(thread_key)

    def kill(self) -> None:
        self.dead = True
        if self.holding is not None:
            self.holding.stop()
        for lane in self.lanes.values():
            if lane.task is not None:
                lane.task.cancel()
        self.resume()

    # -- lanes -----------------------------------------------------------------------

    def _lane(self, thread_key: str) -> _Lane:
        lane = self.lanes.get(thread_key)
        if lane is None:
            lane = self.lanes[thread_key] = _Lane()
        return lane

    def _start(self, thread_key: str) -> None:
        lane = self.lanes[thread_key]
        if lane.task is None and (lane.queue or lane.recorded):
            lane.task = asyncio.get_running_loop().create_task(self._run(thread_key, lane))

    async def _run(self, thread_key: str, lane: _Lane) -> None:
        current.set(self)
        position.set((TP, self.generation))
        try:
            while lane.recorded or lane.queue:
                if lane.recorded:
                    record = lane.recorded.pop(0)
                    result = await send_recorded(record, True, reply_parts(self, []))
                    self.world.trace(self.name, f"reconciled {record.message_id}: {result.outcome}")
                    continue
                offset, first = lane.queue[0]
                if isinstance(first, ApprovalDecision):
                    lane.queue = lane.queue[1:]
                    await self._decide(first)
                    self.open.pop(offset, None)
                    self.commit()
                    continue
                if isinstance(first, Release):
                    lane.queue = lane.queue[1:]
                    await self._release(thread_key, first.key)
                    continue
                batch, lane.queue = messages_of(lane.queue)
                await self._answer(thread_key, batch)
                self.commit()
        except (Rebalancing, Dropped) as exc:
            why = exc.__cause__ if isinstance(exc, Dropped) and exc.__cause__ else exc
            self.world.trace(self.name, f"lane {thread_key} stood down: {type(why).__name__}")
        except (asyncio.CancelledError, Killed):
            self.world.trace(self.name, f"lane {thread_key} cancelled")
        except BrokerUnavailable as exc:
            self.fatal(exc)
        except Exception as exc:
            self.world.errors.append(f"{self.name}: {exc!r}")
            self.world.trace(self.name, f"lane {thread_key} raised {exc!r}")
        finally:
            lane.task = None
        if self.lanes.get(thread_key) is lane and (lane.queue or lane.recorded) and self.owns():
            self._start(thread_key)

    async def _answer(self, thread_key: str, batch: Sequence[tuple[int, Item]]) -> None:
        """A batch of the thread's deliveries answered; their offsets done."""
        taken = [offset for offset, _ in batch]
        messages = distinct(m for _, m in await self.world.letters.admit(self, batch))
        if messages:
            await self._burst(thread_key, messages, taken)
        for offset in taken:
            self.open.pop(offset, None)

    async def _release(self, thread_key: str, key: bytes) -> None:
        """A due thread's held events answered, then settled out of its buffer
        (``Router._release``)."""
        holding = self.holding
        assert holding is not None
        try:
            batch = holding.taken(key)
            if batch:
                await self._answer(thread_key, batch)
            holding.settle(key)
        except BaseException:
            holding.drop(key)
            raise
        finally:
            holding.ended(key)

    async def _burst(self, thread_key: str, messages: list[Inbound], taken: list[int]) -> None:
        """A burst answered as ``Conversation.process`` answers it (``tried``): tried
        again after a failure, then dead-lettered ``record_failed``; the broker away
        (a ledger write that expired) escapes to :meth:`fatal`."""
        burst = list(messages)  # with the newer messages a try takes in, as its next try
        ended: list[Outcome] = []

        async def act() -> None:
            await self.ledger.take_overs.once(0)  # as Conversation.act: F38, F39
            given = list(burst)
            reply = reply_parts(self, taken, thread_key, burst)
            if self.parts is not None:  # a newer message supersedes a waiting draft
                result = await applying.answer(self.parts, given, reply)
            else:
                result = await reply_once(given, reply)
            self.world.trace(self.name, f"burst {[m.message_id for m in given]}: {result.outcome}")
            ended.append(result.outcome)

        failure = await tried(
            act, attempts=RECORD_ATTEMPTS, backoff_s=0.5, flowing=self.owns, on_retry=self._again
        )
        if failure is not None:
            self._again(RECORD_ATTEMPTS, failure)
            await self.world.letters.record_failed(burst, failure)
        failed = {m.event_id for m in burst if ended_failed(self.ledger.get(m.key))}
        await self.fence.check("recording how the events ended")  # as Conversation.process
        ok = failure is None and ended[-1] is not Outcome.FAILED
        self.world.letters.finish(self, taken, ok, failed)

    def _again(self, attempt: int, exc: Exception) -> None:
        """A try of a burst failed: a finding (the product would try it again and
        dead-letter it, unseen), but for a thread the mail API did not list while a draft
        is marked superseded by the burst (F43); the broker away is not this (it escapes,
        fatal)."""
        self.world.trace(self.name, f"burst try {attempt} failed: {exc!r}")
        if isinstance(exc, ThreadUnread):
            return
        self.world.errors.append(f"{self.name}: {exc!r}")

    def fatal(self, exc: BrokerUnavailable) -> None:
        """The broker away escaped a lane job (a burst's, a decision's, an approved
        reply's) or the audit: the worker exits to be restarted (``worker._fatal``), its
        records read again."""
        self.world.trace(self.name, f"exits: {exc!r}")
        loop = asyncio.get_running_loop()
        # a context of its own: the restart's tasks (its audit) must not inherit this
        # lane's record position, which would fence the audit as the worker's is not
        restart = (self.world.kill, self, self.world.broker.restart_s())
        loop.call_soon(*restart, context=contextvars.Context())

    async def _decide(self, decision: ApprovalDecision) -> None:
        """A decision on a draft, applied on its thread's lane as the worker applies it."""
        if self.world.bugs.approval_applied_twice:
            answer = await unchecked_decide(self.parts, decision)
        else:
            await applying.decide(self.parts, decision)
            record = self.ledger.get(decision.key)
            mine = record is not None and record.approval is not None
            mine = mine and record.approval.decision_id == decision.decision_id  # type: ignore[union-attr]
            answer = Answer.APPLIED if mine else Answer.ALREADY
        operator = self.world.operator
        if operator is not None:
            operator.applied_as(decision, answer)
        self.world.trace(self.name, f"decision {decision.decision_id} on {decision.key}: {answer}")

    def commit(self) -> None:
        if self.owns() and not self.paused and not self.cut_for(KAFKA):
            done = min(self.open) if self.open else self.fetched
            if self.world.bugs.commit_before_done:
                done = self.fetched
            self.world.part.committed = done

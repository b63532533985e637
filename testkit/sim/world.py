"""One simulated world: a ledger partition and its deliveries, the members of the consumer
group that take turns owning it, SimMail and SimModel, all on virtual time; and
:func:`run_schedule`, which plays a :class:`~testkit.sim.schedule.Schedule` in it and
judges the end with :func:`testkit.invariants.check`.

What runs is the product's reply path: each burst of a thread's messages goes through
:func:`~onceonly.processors.reply.once.reply_once` with a real
:class:`~onceonly.processors.reply.ledger.TableLedger` (arbitration included), a real
:class:`~onceonly.processors.fence.Fence` and :class:`~onceonly.processors.fence.Rounds`,
and the real :class:`~onceonly.processors.writer.runner.Writer` (timeouts, retries, 429s,
admission on the loop's clock). What the world imitates (stage 1): faust's table over a
shared changelog, the group's generations, offsets committed as lanes finish, a lane per
thread, a rebalance's drain. Killed members restart as fresh processes that reconcile the
pending records they recover with :func:`~onceonly.processors.reply.once.send_recorded`.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from onceonly.processors.exceptions import Rebalancing
from onceonly.processors.fence import Fence, Position, Rounds
from onceonly.processors.flow.admission import Admission
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.reply.once import (
    MailSender,
    ReplyParts,
    SendPolicy,
    reply_once,
    send_recorded,
)
from onceonly.processors.writer.contract import Decline, Draft, Inbound
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.invariants import Email, Message, Observed, Verdict, Violation, check
from testkit.sim.io import Actor, Killed, current, remote
from testkit.sim.mail import SimMail
from testkit.sim.model import SimModel
from testkit.sim.schedule import Bugs, Fault, Schedule

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: the trace's events about the group, faults and members, shown with any violation's
_LIFECYCLE = ("paused", "resumed", "killed", "started", "assigned", "revoked")


def _lifecycle(event: str) -> bool:
    who, what = event[11:17].strip(), event[18:]
    return who in ("group", "fault") or what.startswith(_LIFECYCLE)


TP = ("deliveries", 0)
SESSION_S = 10.0  #: a member paused or dead this long loses its partition
DRAIN_GRACE_S = 3.0  #: a revoked member's lanes get this long, then are cancelled
#: the partition and generation of the record a lane works for (faust's current event)
position: contextvars.ContextVar[Position | None] = contextvars.ContextVar(
    "sim_position", default=None
)


class Partition:
    """The deliveries partition and its co-partitioned ledger partition, and the group's
    word on who owns them."""

    def __init__(self) -> None:
        self.deliveries: list[Inbound] = []
        self.changelog: list[tuple[bytes, bytes | None]] = []
        #: who wrote each changelog record, and whether it owned the partition then
        self.writers: list[tuple[str, bool]] = []
        self.generation = 0
        self.owner: Member | None = None
        self.committed = 0


class SimTable:
    """A member's store of the ledger partition, over the shared changelog (as faust's
    table: ``write_through`` appends, awaits the broker's ack, then stores; the applied
    offset moves past each own write and to the end on a recovery)."""

    def __init__(self, part: Partition, world: World, member: Member) -> None:
        self.part = part
        self.world = world
        self.member = member
        self.store: dict[bytes, bytes] = {}
        self.applied = -1

    def get(self, key: bytes) -> bytes | None:
        return self.store.get(key)

    def __getitem__(self, key: bytes) -> bytes:
        return self.store[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.store[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self.store[key]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.store.items()))

    def values(self) -> Iterator[bytes]:
        return iter(list(self.store.values()))

    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return iter(sorted((k, v) for k, v in self.store.items() if after is None or k > after))

    def partition_of(self, key: bytes) -> int:
        return 0

    def applied_offset(self, partition: int) -> int:
        return self.applied

    async def write_through(self, key: bytes, value: bytes) -> tuple[int, int]:
        async def append() -> int:
            self.part.changelog.append((key, value))
            offset = len(self.part.changelog) - 1
            self.part.writers.append((self.member.name, self.member.owns()))
            self.world.trace("broker", f"ledger@{offset} {_describe(key, value)}")
            return offset

        offset = await remote(self.world.broker_latency(), append, self.world.broker_latency())
        self.store[key] = value
        self.applied = offset
        return 0, offset

    def recover(self) -> None:
        for key, value in self.part.changelog[self.applied + 1 :]:
            if value is None:
                self.store.pop(key, None)
            else:
                self.store[key] = value
        self.applied = len(self.part.changelog) - 1


class LateLedger(TableLedger):
    """Planted bug (b): a *pending* record is held back and written only with the record
    that follows it (after the send)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[str, ReplyRecord] = {}

    async def put(self, record: ReplyRecord) -> None:
        if record.state is ReplyState.PENDING:
            self._held[record.key] = record
            return
        held = self._held.pop(record.key, None)
        if held is not None:
            await super().put(held)
        await super().put(record)


@dataclass
class _Lane:
    task: asyncio.Task[None] | None = None
    queue: list[tuple[int, Inbound]] = field(default_factory=list)
    recorded: list[ReplyRecord] = field(default_factory=list)


class Member(Actor):
    """One worker process in the group (a restart is a new Member)."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__(name)
        self.world = world
        self.generation = -1
        self.table = SimTable(world.part, world, self)
        self.fence = Fence(self._confirm, self._current)
        self._rounds: Rounds[Any, bool] = Rounds(self._ask)
        ledger_type = LateLedger if world.bugs.ledger_after_send else TableLedger
        self.ledger = ledger_type(self.table, fence=self.fence.check, read_log=self._read_log)
        loop = asyncio.get_running_loop()
        self.writer = Writer(
            world.model,
            WriterPolicy(timeout_s=120.0, attempts=3),
            admission=Admission(16, clock=loop.time),
        )
        self.lanes: dict[str, _Lane] = {}
        self.open: dict[int, None] = {}
        self.fetched = 0
        #: armed: let this many checks pass, then pause this long right after the next
        self.pause_at_confirm: tuple[int, float] | None = None

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

        async def coordinator() -> bool:
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
            return await remote(latency(), coordinator, latency())
        except Killed:
            return False  # a dead member's round: its lanes are cancelled

    async def _read_log(
        self, partition: int, first: int, last: int
    ) -> Sequence[tuple[int, bytes, bytes | None]]:
        async def read() -> list[tuple[int, bytes, bytes | None]]:
            log = self.world.part.changelog
            return [(o, log[o][0], log[o][1]) for o in range(first, min(last, len(log) - 1) + 1)]

        latency = self.world.broker_latency
        return await remote(latency(), read, latency())

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
        self.open = {}
        self.fetched = self.world.part.committed
        for raw in list(self.table.store.values()):
            try:
                record = ReplyRecord.decode(raw)
            except Exception:
                continue
            if record.state is ReplyState.PENDING:
                self._lane(record.thread_key).recorded.append(record)
        self.world.trace(self.name, f"assigned generation {generation}")
        self.fetch()

    def revoke(self) -> None:
        """The partition is gone: queued work is dropped; running lanes get the grace."""
        self.ledger.forget()
        for lane in self.lanes.values():
            lane.queue.clear()
            lane.recorded.clear()
        running = [lane.task for lane in self.lanes.values() if lane.task is not None]
        if running:
            loop = asyncio.get_running_loop()
            loop.call_later(DRAIN_GRACE_S, lambda: [t.cancel() for t in running])
        self.world.trace(self.name, f"revoked (generation {self.generation})")

    def fetch(self) -> None:
        if not self.owns() or self.paused:
            return
        part = self.world.part
        while self.fetched < len(part.deliveries):
            message = part.deliveries[self.fetched]
            self.open[self.fetched] = None
            self._lane(message.thread_key).queue.append((self.fetched, message))
            self.fetched += 1
        for key in list(self.lanes):
            self._start(key)

    def kill(self) -> None:
        self.dead = True
        for lane in self.lanes.values():
            if lane.task is not None:
                lane.task.cancel()
        self.resume()

    # -- lanes -----------------------------------------------------------------------

    def _lane(self, thread_key: str) -> _Lane:
        return self.lanes.setdefault(thread_key, _Lane())

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
                    result = await send_recorded(record, True, self._parts([]))
                    self.world.trace(self.name, f"reconciled {record.message_id}: {result.outcome}")
                    continue
                batch, lane.queue = lane.queue, []
                taken = [offset for offset, _ in batch]
                messages = _unique(m for _, m in batch)
                result = await reply_once(messages, self._parts(taken, thread_key))
                self.world.trace(
                    self.name,
                    f"burst {[m.message_id for m in messages]}: {result.outcome}",
                )
                for offset in taken:
                    self.open.pop(offset, None)
                self._commit()
        except Rebalancing as exc:
            self.world.trace(self.name, f"lane {thread_key} stood down: {type(exc).__name__}")
        except (asyncio.CancelledError, Killed):
            self.world.trace(self.name, f"lane {thread_key} cancelled")
        except Exception as exc:
            self.world.errors.append(f"{self.name}: {exc!r}")
            self.world.trace(self.name, f"lane {thread_key} raised {exc!r}")
        finally:
            lane.task = None
        if self.lanes.get(thread_key) is lane and (lane.queue or lane.recorded) and self.owns():
            self._start(thread_key)

    def _commit(self) -> None:
        if self.owns() and not self.paused:
            self.world.part.committed = min(self.open) if self.open else self.fetched

    def _parts(self, taken: list[int], thread_key: str = "") -> ReplyParts:
        world = self.world
        sender: MailSender = (
            world.mail if world.bugs.no_fence_before_send else self.fence.sender(world.mail)
        )

        async def newer() -> Sequence[Inbound]:
            lane = self.lanes.get(thread_key)
            if lane is None or not lane.queue:
                return ()
            more, lane.queue = lane.queue, []
            taken.extend(offset for offset, _ in more)
            return _unique(m for _, m in more)

        async def dead_letter(record: ReplyRecord, reason: str, burst: Sequence[Inbound]) -> None:
            named = [
                (record.inbox_id, record.message_id),
                *((m.inbox_id, m.message_id) for m in burst),
            ]
            for pair in named:
                world.dead_lettered[pair] = reason
            world.trace(self.name, f"dead-lettered {[p[1] for p in named]}: {reason}")

        async def write(messages: Sequence[Inbound]) -> str | Decline | Draft:
            return await self.writer.write(messages)

        loop = asyncio.get_running_loop()
        return ReplyParts(
            ledger=self.ledger,
            sender=sender,
            write=write,
            dead_letter=dead_letter,
            now=world.now,
            policy=SendPolicy(attempts=5, in_flight_wait_s=60.0),
            newer=newer,
            may_retry=self.owns,
            arbitrate=self.ledger.arbitrate,
            monotonic=loop.time,
        )


def _final(record: ReplyRecord) -> bool:
    return record.state in (ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED)


def _unique(messages: Iterator[Inbound] | Sequence[Inbound]) -> list[Inbound]:
    seen: dict[str, Inbound] = {}
    for message in messages:
        seen.setdefault(message.key, message)
    return list(seen.values())


def _describe(key: bytes, value: bytes | None) -> str:
    if value is None:
        return f"{key.decode()[:14]} tombstone"
    record = ReplyRecord.decode(value)
    extra = f" text={record.reply_text!r}" if record.reply_text else ""
    extra += f" by={record.covered_by[:14]}" if record.covered_by else ""
    return f"{record.message_id} {record.state.value}{extra}"


class World:
    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.bugs: Bugs = schedule.bugs
        self.rng = random.Random(schedule.seed * 7919 + 1)
        self.loop = asyncio.get_running_loop()
        self.events: list[str] = []
        self.part = Partition()
        self.mail = SimMail(random.Random(schedule.seed * 31 + 2), self.trace, self.loop.time)
        self.model = SimModel(random.Random(schedule.seed * 17 + 3), self.trace)
        self.mail.faults.ignore_keys = schedule.ignore_keys
        self.members: dict[str, Member] = {}
        self.dead_lettered: dict[tuple[str, str], str] = {}
        self.errors: list[str] = []
        self._incarnations: dict[str, int] = {}
        self.pending = 0  #: faults and arrivals not yet played

    def trace(self, who: str, what: str) -> None:
        self.events.append(f"{self.loop.time():10.3f} {who:>6} {what}")

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.loop.time())

    def broker_latency(self) -> float:
        return self.rng.uniform(0.001, 0.02)

    # -- members ---------------------------------------------------------------------

    def start(self, slot: str) -> Member:
        n = self._incarnations[slot] = self._incarnations.get(slot, 0) + 1
        member = Member(self, f"{slot}{n}")
        self.members[slot] = member
        self.trace(member.name, "started")
        return member

    def available(self) -> list[Member]:
        return [m for m in self.members.values() if not m.dead and not m.paused]

    def rebalance(self, reason: str) -> None:
        part = self.part
        old = part.owner
        part.generation += 1
        part.owner = None
        self.trace("group", f"rebalance to generation {part.generation}: {reason}")
        if old is not None and not old.dead and not old.paused:
            old.revoke()
        generation = part.generation

        def assign() -> None:
            if part.generation != generation:
                return
            candidates = self.available()
            if not candidates:
                self.trace("group", "no member to assign")
                return
            owner = candidates[self.rng.randrange(len(candidates))]
            part.owner = owner
            owner.assign(generation)

        self.loop.call_later(DRAIN_GRACE_S + 0.5, assign)

    def pause(self, member: Member, seconds: float) -> None:
        if member.dead or member.paused:
            return
        member.pause()
        self.trace(member.name, f"paused for {seconds:.3f}s")
        if seconds > SESSION_S and self.part.owner is member:
            self.loop.call_later(SESSION_S, self._expired, member)
        self.loop.call_later(seconds, self._resume, member)

    def _expired(self, member: Member) -> None:
        if self.part.owner is member and member.paused:
            self.rebalance(f"{member.name}'s session expired")

    def _resume(self, member: Member) -> None:
        if member.dead:
            return
        member.resume()
        self.trace(member.name, "resumed")
        if member.generation != self.part.generation:
            member.revoke()  # it learns its generation ended: a zombie drains
            if self.part.owner is None:
                self.rebalance(f"{member.name} rejoined")
        else:
            member.fetch()

    def kill(self, member: Member, restart_s: float) -> None:
        if member.dead:
            return
        member.kill()
        self.trace(member.name, "killed")
        slot = member.name.rstrip("0123456789")

        def restart() -> None:
            self.start(slot)
            self.rebalance(f"{slot} restarted")

        self.loop.call_later(restart_s, restart)

    # -- the schedule ----------------------------------------------------------------

    def arrive(self, message: Inbound, text: str) -> None:
        self.mail.receive(message.inbox_id, message.message_id, message.thread_id, text)
        self.part.deliveries.append(message)
        self.trace("world", f"delivery {message.message_id} thread {message.thread_id}")
        owner = self.part.owner
        if owner is not None:
            owner.fetch()

    def play(self, fault: Fault) -> None:
        owner = self.part.owner
        target = owner or next(iter(self.available()), None)
        self.trace("fault", f"{fault.kind} {fault.arg:.3f}")
        if fault.kind == "kill" and target is not None:
            self.kill(target, fault.arg)
        elif fault.kind == "pause" and target is not None:
            self.pause(target, fault.arg)
        elif fault.kind == "pause_after_check" and target is not None:
            target.pause_at_confirm = (self.rng.randint(0, 2), fault.arg)
        elif fault.kind == "rebalance":
            self.rebalance("a member joined or left")
        elif fault.kind == "mail_5xx":
            self.mail.faults.fail_next += int(fault.arg)
        elif fault.kind == "mail_lost":
            self.mail.faults.lose_next += int(fault.arg)
        elif fault.kind == "model_fail":
            self.model.faults.fail_next += int(fault.arg)
        elif fault.kind == "model_429":
            self.model.faults.throttle_next += int(fault.arg)
        elif fault.kind == "model_hang":
            self.model.faults.hang_next += int(fault.arg)

    def busy(self) -> bool:
        part = self.part
        running = any(
            lane.task is not None for m in self.members.values() for lane in m.lanes.values()
        )
        return (
            self.pending > 0
            or running
            or part.owner is None
            or part.committed < len(part.deliveries)
            or any(m.paused for m in self.members.values())
        )

    def zombie_last_words(self) -> dict[str, str]:
        """Known finding F1: keys whose last ledger record is a *pending* one that a member
        no longer owning the partition landed after the key's final record (sent, covered)
        (a zombie paused after its check; its send was then fenced or arbitrated)."""
        last: dict[bytes, int] = {}
        for offset, (key, _) in enumerate(self.part.changelog):
            last[key] = offset
        found: dict[str, str] = {}
        for key, offset in last.items():
            value = self.part.changelog[offset][1]
            writer, owned = self.part.writers[offset]
            if value is None or owned:
                continue
            record = ReplyRecord.decode(value)
            if record.state is not ReplyState.PENDING:
                continue
            finals = [
                o
                for o, (k, v) in enumerate(self.part.changelog[:offset])
                if k == key and v is not None and _final(ReplyRecord.decode(v))
            ]
            if finals:
                found[record.message_id] = (
                    f"{writer}'s pending at {offset} after final at {finals[-1]}"
                )
        return found

    def observed(self) -> Observed:
        ledger: dict[str, ReplyRecord] = {}
        for key, value in self.part.changelog:
            if value is None:
                ledger.pop(key.decode(), None)
            else:
                ledger[key.decode()] = ReplyRecord.decode(value)
        return Observed(
            messages=tuple(Message(m.inbox_id, m.message_id) for m in self.schedule.messages),
            emails=tuple(Email(e.inbox_id, e.replied_to, e.text) for e in self.mail.outbox),
            ledger=ledger,
            writer_calls=tuple(self.model.calls),
            dead_lettered=dict(self.dead_lettered),
        )


@dataclass(frozen=True)
class Result:
    seed: int
    verdict: Verdict
    events: tuple[str, ...]
    errors: tuple[str, ...]
    settled: bool
    virtual_s: float
    #: reply key -> message id, to find a key's events in the trace
    message_of: dict[str, str] = field(default_factory=dict, compare=False)
    #: message id -> known finding F1 (a zombie's pending record is its key's last word)
    known: dict[str, str] = field(default_factory=dict, compare=False)

    def _message(self, violation: Violation) -> str:
        subject = violation.subject.split(" in ")[0]
        return self.message_of.get(subject, subject)

    @property
    def violations(self) -> list[Violation]:
        """The violations no known finding explains."""
        return [v for v in self.verdict.violations if self._message(v) not in self.known]

    @property
    def known_violations(self) -> list[Violation]:
        return [v for v in self.verdict.violations if self._message(v) in self.known]

    @property
    def passed(self) -> bool:
        return not self.violations and not self.errors and self.settled

    def problems(self) -> list[str]:
        found = [str(v) for v in self.violations]
        found += [f"uncaught: {e}" for e in self.errors]
        if not self.settled:
            found.append("unsettled: the schedule did not settle before its deadline")
        return found

    def report(self, around: int = 40) -> str:
        """The seed, each broken invariant, and the trace events about its subject."""
        lines = [f"seed {self.seed}: {len(self.problems())} problem(s)"]
        lines += [f"  {problem}" for problem in self.problems()]
        lines += [
            f"  known F1 ({self.known[self._message(v)]}): {v}" for v in self.known_violations
        ]
        for violation in self.violations[:3]:
            subject = self._message(violation)
            related = [e for e in self.events if subject in e or _lifecycle(e)]
            lines.append(f"  -- trace events naming {subject} --")
            lines += [f"  {e}" for e in related[-around:]]
        return "\n".join(lines)


async def _play(schedule: Schedule) -> Result:
    world = World(schedule)
    loop = world.loop
    for slot in ("a", "b"):
        world.start(slot)
    world.rebalance("the group formed")
    world.pending = len(schedule.messages) + len(schedule.faults)

    def arrival(index: int) -> None:
        world.pending -= 1
        world.arrive(schedule.messages[index], f"message {index}")

    def fault(index: int) -> None:
        world.pending -= 1
        world.play(schedule.faults[index])

    for index, at in enumerate(schedule.arrivals):
        loop.call_at(at, arrival, index)
    for index, planned in enumerate(schedule.faults):
        loop.call_at(planned.at, fault, index)
    deadline = schedule.end + 6 * 3600
    while world.busy() and loop.time() < deadline:
        await asyncio.sleep(5.0)
    settled = not world.busy()
    verdict = check(world.observed())
    return Result(
        schedule.seed,
        verdict,
        tuple(world.events),
        tuple(world.errors),
        settled,
        loop.time(),
        {m.key: m.message_id for m in schedule.messages},
        world.zombie_last_words(),
    )


def run_schedule(schedule: Schedule) -> Result:
    """Play ``schedule`` on a fresh virtual loop, seeded; judge its end."""
    from testkit.sim.loop import run

    random.seed(schedule.seed)  # tenacity's jitter reads the global random
    return run(_play(schedule))

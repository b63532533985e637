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
shared changelog (its leader failing over, its writes expiring: :mod:`testkit.sim.broker`),
the group's generations, offsets committed as lanes finish, a lane per thread, a
rebalance's drain. Killed members restart as fresh processes that reconcile the
pending records they recover with :func:`~onceonly.processors.reply.once.send_recorded`:
half of them on a new host (their tables recovered from the changelogs alone), half on
their own disk (each table's store as the kill left it, its unsent writes in it, recovered
from its own offset on, as faust recovers a RocksDB store).
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from onceonly.processors.writer.contract import Inbound
from onceonly.schemas.approval import ApprovalDecision
from onceonly.schemas.dead_letter import Check
from onceonly.schemas.ledger import EventState, ReplyRecord
from testkit.invariants import BURST_FAILED, Email, Message, Observed
from testkit.sim.approvals import VARIANTS, Operator
from testkit.sim.broker import Broker
from testkit.sim.catchup import CatchUps
from testkit.sim.events import Changelog, entry_of
from testkit.sim.io import KAFKA, MAIL
from testkit.sim.letters import Letters, Resent
from testkit.sim.log import DRAIN_GRACE_S, SESSION_S, Cleaner, Partition
from testkit.sim.mail import SimMail
from testkit.sim.member import Disk, Member
from testkit.sim.model import SimModel
from testkit.sim.replay import replay
from testkit.sim.schedule import Bugs, Fault, Schedule

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: of the restarts, the share on the killed worker's own disk
SAME_DISK = 0.5
#: the trace's events about the group, faults and members, shown with any violation's
_LIFECYCLE = ("paused", "resumed", "killed", "started", "assigned", "revoked")


def line(event: tuple[float, str, object]) -> str:
    """A trace event as the trace prints it."""
    at, who, what = event
    return f"{at:10.3f} {who:>6} {what}"


def _lifecycle(event: str) -> bool:
    who, what = event[11:17].strip(), event[18:]
    return who in ("group", "fault") or what.startswith(_LIFECYCLE)


class World:
    #: a killed worker restarts on its own disk (:data:`SAME_DISK` of the restarts, drawn
    #: from a generator of their own) or on a new host; ``--no-same-disk``: always a new host
    same_disk: ClassVar[bool] = True

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.bugs: Bugs = schedule.bugs
        self.rng = random.Random(schedule.seed * 7919 + 1)
        self.loop = asyncio.get_running_loop()
        #: the trace: (virtual time, who, what), formatted only when read (:func:`line`);
        #: ``what`` is a str or an object whose str() is the event's text
        self.events: list[tuple[float, str, object]] = []
        self.part = Partition()
        #: the events table's changelog (dedupe), each member's store over it
        self.event_log = Changelog(schedule.seed)
        #: the holds table's changelog (the reorder window: testkit.sim.holding)
        self.hold_log = Changelog(schedule.seed, salt=97)
        #: Kafka's log cleaner over the ledger partition (a generator of its own)
        self.cleaner = Cleaner(
            self.part, random.Random(schedule.seed * 8011 + 41), self.loop.time, self.trace
        )
        self.mail = SimMail(random.Random(schedule.seed * 31 + 2), self.trace, self.loop.time)
        self.model = SimModel(random.Random(schedule.seed * 17 + 3), self.trace)
        self.mail.faults.ignore_keys = schedule.ignore_keys
        self.members: dict[str, Member] = {}
        #: the dead-letter topic, the operator's retry and the forger (testkit.sim.letters)
        self.letters = Letters(self)
        self.errors: list[str] = []
        #: messages whose reply a member recorded *failed* while cut off from the mail API
        #: (its last read of the thread could not reach it): the late send's window
        self.failed_unread: set[str] = set()
        self._incarnations: dict[str, int] = {}
        self.pending = 0  #: faults and arrivals not yet played
        self._now = (0.0, EPOCH)  #: the virtual time :meth:`now` last made a datetime of
        self.operator = Operator(self) if schedule.approval else None
        #: the operator's catch-ups (testkit.sim.catchup), their listing's own generator
        self.catch_ups = CatchUps(self, random.Random(schedule.seed * 8017 + 47))
        #: the changelogs' leader failing over, and expiring writes (testkit.sim.broker)
        self.broker = Broker(self, random.Random(schedule.seed * 8087 + 73))
        #: whether each restart finds its disk (a generator of its own)
        self._disks = random.Random(schedule.seed * 8093 + 89)

    def trace(self, who: str, what: object) -> None:
        self.events.append((self.loop.time(), who, what))

    def now(self) -> datetime:
        at = self.loop.time()
        if at != self._now[0]:
            self._now = (at, EPOCH + timedelta(seconds=at))
        return self._now[1]

    def broker_latency(self) -> float:
        return self.rng.uniform(0.001, 0.02)

    # -- members ---------------------------------------------------------------------

    def start(self, slot: str, disk: Disk | None = None) -> Member:
        n = self._incarnations[slot] = self._incarnations.get(slot, 0) + 1
        member = Member(self, f"{slot}{n}", disk)
        self.members[slot] = member
        self.trace(member.name, "started" if disk is None else "started on its own disk")
        return member

    def available(self) -> list[Member]:
        return [m for m in self.members.values() if not (m.dead or m.paused or m.cut_for(KAFKA))]

    def rebalance(self, reason: str) -> None:
        part = self.part
        old = part.owner
        part.generation += 1
        part.owner = None
        self.trace("group", f"rebalance to generation {part.generation}: {reason}")
        if old is not None and not old.dead and not old.paused and not old.cut_for(KAFKA):
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
        if self.part.owner is member and (member.paused or member.cut_for(KAFKA)):
            self.rebalance(f"{member.name}'s session expired")

    def cut(self, member: Member, seconds: float, far: str = KAFKA) -> None:
        """``member`` cut off from ``far`` for ``seconds``; it runs on, and the other far
        ends answer it. From the broker (:data:`KAFKA`): no request of its reaches it (its
        fence checks, writes, reads, fetches and commits wait for the heal), and past the
        session the group gives its partition away, which it learns at the heal. From the
        mail API (:data:`MAIL`): its sends and thread reads leave at the heal, and time out
        before it (``mail.timed``)."""
        if member.dead or member.cut_for(far):
            return
        member.cut[far] = self.loop.time() + seconds
        self.trace(member.name, f"cut off from {far} for {seconds:.3f}s")
        if far == KAFKA and seconds > SESSION_S and self.part.owner is member:
            self.loop.call_later(SESSION_S, self._expired, member)
        self.loop.call_later(seconds, self._reconnected, member, far)

    def _reconnected(self, member: Member, far: str) -> None:
        if member.dead:
            return
        self.trace(member.name, f"reconnected to {far}")
        if member.paused or far != KAFKA:
            return  # its resume meets the group
        self._rejoin(member, cut=True)

    def _resume(self, member: Member) -> None:
        if member.dead:
            return
        member.resume()
        self.trace(member.name, "resumed")
        if member.cut_for(KAFKA):
            return  # still cut off: it meets the group at the heal
        self._rejoin(member, cut=False)

    def _rejoin(self, member: Member, cut: bool) -> None:
        """``member`` reaches the group again after a pause (or a ``cut`` from the broker)."""
        if member.generation != self.part.generation:
            member.revoke()  # it learns its generation ended: a zombie drains
            if self.part.owner is None:
                self.rebalance(f"{member.name} rejoined")
            return
        member.fetch()
        if cut:
            member.commit()  # what its lanes finished during the cut

    def kill(self, member: Member, restart_s: float) -> None:
        if member.dead:
            return
        disk = member.disk() if self.same_disk and self._disks.random() < SAME_DISK else None
        member.kill()
        self.trace(member.name, "killed")
        slot = member.name.rstrip("0123456789")

        def restart() -> None:
            self.start(slot, disk)
            self.rebalance(f"{slot} restarted")

        self.loop.call_later(restart_s, restart)

    # -- the schedule ----------------------------------------------------------------

    def arrive(self, message: Inbound, text: str) -> None:
        self.mail.receive(message.inbox_id, message.message_id, message.thread_id, text)
        if message.message_id in self.schedule.lost:
            self.trace("world", f"webhook lost: {message.message_id} thread {message.thread_id}")
            return
        self.trace("world", f"delivery {message.message_id} thread {message.thread_id}")
        self.deliver(message)

    def deliver(self, item: Inbound | ApprovalDecision | Resent) -> None:
        """A record on the deliveries partition: a message, a decision on a draft, or an
        envelope a dead-letter retry sent again."""
        self.part.deliveries.append(item)
        owner = self.part.owner
        if owner is not None:
            owner.fetch()

    def play(self, fault: Fault) -> None:
        owner = self.part.owner
        target = owner or next(iter(self.available()), None)
        self.trace("fault", f"{fault.kind} {fault.arg:.3f}")
        if fault.kind == "kill" and target is not None:
            self.kill(target, fault.arg)
        elif fault.kind == "cut_kafka" and target is not None:
            self.cut(target, fault.arg)
        elif fault.kind == "cut_mail" and target is not None:
            self.cut(target, fault.arg, MAIL)
        elif fault.kind == "pause" and target is not None:
            self.pause(target, fault.arg)
        elif fault.kind == "pause_after_check" and target is not None:
            target.pause_at_confirm = (self.rng.randint(0, 2), fault.arg)
        elif fault.kind == "pause_after_write" and target is not None:
            target.pause_after_write = fault.arg
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
        elif fault.kind == "decide" and self.operator is not None:
            self.operator.play(VARIANTS[int(fault.arg)])
        elif fault.kind == "retry":
            self.letters.retry()
        elif fault.kind == "forge":
            self.letters.forge(int(fault.arg))
        elif fault.kind == "catch_up":
            self.catch_ups.play()
        elif fault.kind == "redeliver":
            self.redeliver(int(fault.arg))
        elif fault.kind in ("failover", "produce_expiry"):
            self.broker.play(fault)
        elif fault.kind == "replay":
            replay(self, fault.arg)

    def redeliver(self, index: int) -> None:
        """A provider delivers message ``index``'s webhook again (its retry: the first
        delivery's answer was lost or late) or, for a lost webhook, at last."""
        message = self.schedule.by_index(index)
        if message is None:  # left out of a shrunk schedule
            return
        late = message.message_id in self.schedule.lost
        what = "late" if late else "again"
        self.trace("world", f"webhook {what}: {message.message_id} thread {message.thread_id}")
        self.deliver(message)

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
            or any(m.paused or m.cut_for(KAFKA) or m.cut_for(MAIL) for m in self.members.values())
            or (part.owner is not None and part.owner.audited < len(part.changelog))
            or (part.owner is not None and part.owner.holds_any())
            or (part.owner is not None and len(part.owner.late_sends) > 0)
            or self._undecided()
            or self.catch_ups.running()
        )

    def _undecided(self) -> bool:
        """Drafts awaiting a decision, but for a late draft its owner never held whose
        message's burst is in an open letter: its retry's, not a decision's (a decision is
        refused "no reply in the ledger"; F43's seed 920000705)."""
        if self.operator is None:
            return False
        letters, owner = self.letters.open_pairs(), self.part.owner

        def the_letters(record: ReplyRecord) -> bool:
            failed = letters.get((record.inbox_id, record.message_id)) == BURST_FAILED
            return failed and owner is not None and owner.ledger.get(record.key) is None

        return any(not the_letters(r) for r in self.operator.waiting())

    def observed(self) -> Observed:
        last: dict[bytes, bytes] = {}  # each key's last word, in the order a dict of them keeps
        part = self.part
        for key, value in part.changelog:
            if value is None:
                last.pop(key, None)
            else:
                last[key] = value
        ledger = {key.decode(): part.record(value) for key, value in last.items()}
        operator = self.operator
        forged = (Message(m.inbox_id, m.message_id, False) for m in self.letters.forged)
        return Observed(
            messages=(
                *(Message(m.inbox_id, m.message_id) for m in self.schedule.messages),
                *forged,
            ),
            emails=tuple(Email(e.inbox_id, e.replied_to, e.text) for e in self.mail.outbox),
            ledger=ledger,
            writer_calls=tuple(self.model.calls),
            dead_lettered=self.letters.open_pairs(),
            rerun=_rerun(self.letters, self.event_log),
            drafts=frozenset(operator.drafts) if operator else frozenset(),
            decisions=operator.decisions() if operator else (),
        )


def _rerun(letters: Letters, events: Changelog) -> frozenset[tuple[str, str]]:
    """The messages an open letter names whose retry runs their event again: every MAC
    valid, the event's last entry in the events table not *succeeded* (a replay of a
    failed or unfinished event runs; a ``retry_raced`` letter whose raced delivery ended
    the event failed is one: finding F53)."""
    state, found = events.state, set[tuple[str, str]]()
    for letter in letters.letters():
        if not letter.open or letter.letter.get("check") == Check.BAD_MAC:
            continue
        for entry in letter.letter.get("envelopes", ()):
            event = entry_of(state, f"agentmail:{entry.get('event_id')}".encode())
            if event is None or event.state is not EventState.SUCCEEDED:
                found.add((str(entry.get("account_id")), str(entry.get("message_id"))))
    return frozenset(found)

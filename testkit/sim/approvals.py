"""Approvals in the simulated world: the operator who decides on drafts, and what a member
needs to apply a decision with the product's own code.

With approval required (``Schedule.approval``), every reply the writer writes is a draft
(:func:`~onceonly.processors.approval.decisions.by_mode`, ``always``) and a burst goes
through :func:`~onceonly.processors.approval.applying.answer`, which supersedes a draft still
waiting when a newer message of its thread comes. The :class:`Operator` plays the
schedule's ``decide`` events: it reads the ledger as the CLI or the web page does (each
key's last record), picks a draft awaiting a decision, and makes one or two decisions on it
with :func:`~onceonly.operations.approvals.decision_for` and
:func:`~onceonly.operations.approvals.judge` (what ``onceonly approve`` and the page do
before they produce), each produced after its maker's think time to the deliveries
partition, keyed by the thread. The member applies it on the thread's lane with
:func:`~onceonly.processors.approval.applying.decide`, as the worker does.

:func:`unchecked_decide` is the planted bug ``approval-applied-twice``: the decision applied
as if the draft still awaited one, without the product's check that a decision was applied
already or that a newer message superseded the draft.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from onceonly.operations.approvals import Status, decision_for, judge
from onceonly.processors.approval import applying
from onceonly.processors.approval.decisions import Answer, apply
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.schemas.approval import Action, ApprovalDecision
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.invariants import Decision
from testkit.sim.mail import MemberMail, read

if TYPE_CHECKING:
    from testkit.sim.member import Member
    from testkit.sim.world import World

#: what one ``decide`` event does: one maker, or two (at once, or from two places)
VARIANTS = ("approve", "reject", "edit", "twice", "two_places", "retry")


class _Nothing:
    """Metrics nobody reads: every attribute, call and label is itself."""

    def __getattr__(self, name: str) -> _Nothing:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Nothing:
        return self


class ChannelMail(MemberMail):
    """The mail API as a member's AgentMail channel reaches it: sends, and thread reads."""

    async def thread(self, account: str, thread_id: str) -> list[dict[str, Any]]:
        latency = self.mail._latency
        copied = lambda: _copy(self.mail, account, thread_id)  # noqa: E731
        return await read(latency(), copied, latency(), f"a read of thread {thread_id}")


def _copy(mail: Any, account: str, thread_id: str) -> list[dict[str, Any]]:
    return [dict(m) for m in mail._threads.get((account, thread_id), [])]


def worker_parts(member: Member) -> Any:
    """What :func:`applying.decide` and :func:`applying.answer` reach of a worker
    (``WorkerParts``): the member's ledger, fence and ownership, its mail as an AgentMail
    channel, the world's dead-letter writer (:mod:`testkit.sim.letters`); metrics that
    count nothing."""
    world = member.world
    mail: Any = ChannelMail(world.mail, member.owns)  # a MailClient's reply, find, thread
    channel = AgentMailChannel(mail)
    settings = SimpleNamespace(approval="always", send_attempts=5, send_in_flight_wait_s=60.0)

    return SimpleNamespace(
        ledger=member.ledger,
        fence=member.fence,
        channels={"agentmail": channel},
        settings=settings,
        metrics=_Nothing(),
        flowing=member.owns,
        dead_letters=world.letters.writer,
        now=world.now,
        late_sends=member.late_sends,
    )


async def unchecked_decide(parts: Any, decision: ApprovalDecision) -> Answer:
    """The planted bug: ``decision`` applied to the reply's record as if it still awaited
    one (no check for a decision applied before, nor for a newer message's supersede),
    then an approved reply sent as :func:`applying.decide` sends it."""
    record: ReplyRecord | None = parts.ledger.get(decision.key)
    if record is None or record.reply_text is None:
        return Answer.REFUSED
    draft = record.with_state(ReplyState.AWAITING, approval=None, covered_by=None)
    if record.approval is not None and record.approval.draft_text is not None:
        draft = replace(draft, reply_text=record.approval.draft_text)
    applied = apply(draft, decision)
    if applied.record is None:
        return applied.answer
    await parts.ledger.put(applied.record)
    if applied.record.state is ReplyState.PENDING:
        await applying._send(parts, applied.record, reconcile=False)
    return applied.answer


@dataclass
class _Made:
    decision: ApprovalDecision
    text: str | None  #: the text it approves (None: a rejection)


class Operator:
    """The people deciding on drafts, from the CLI and the web page."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = random.Random(world.schedule.seed * 104729 + 11)
        self.latest: dict[str, ReplyRecord] = {}  #: each key's last record, as read so far
        self._read = 0
        self.made: dict[str, _Made] = {}  #: decision id -> the decision
        self.applied: dict[str, bool] = {}  #: decision id -> the worker applied it
        self.drafts: set[str] = set()  #: keys the writer drafted
        self.swept: dict[str, str] = {}  #: key -> the sweep's decision id
        self._again: dict[tuple[str, str | None], int] = {}  #: per draft: key and text
        self._count = 0

    def read(self) -> dict[str, ReplyRecord]:
        """The ledger's last record per key (the topic read from where the last read ended)."""
        part = self.world.part
        for key, value in part.changelog[self._read :]:
            if value is None:
                self.latest.pop(key.decode(), None)
                continue
            record = part.record(value)
            self.latest[record.key] = record
            if record.state is ReplyState.AWAITING:
                self.drafts.add(record.key)
        self._read = len(part.changelog)
        return self.latest

    def waiting(self) -> list[ReplyRecord]:
        records = self.read().values()
        return sorted((r for r in records if r.state is ReplyState.AWAITING), key=_order)

    def play(self, variant: str) -> None:
        """A ``decide`` event: a draft awaiting a decision, and its makers' decisions."""
        waiting = self.waiting()
        if not waiting:
            self.world.trace("people", f"{variant}: no draft awaiting a decision")
            return
        record = waiting[self.rng.randrange(len(waiting))]
        think = round(self.rng.uniform(0.0, 40.0), 3)
        match variant:
            case "approve" | "reject" | "edit":
                self.make(record, variant, "cli:ann", think)
            case "twice":  # two people approve at once
                self.make(record, "approve", "cli:ann", think)
                self.make(record, "approve", "web:bob", think)
            case "two_places":
                self.make(record, "approve", "cli:ann", think)
                other = self.rng.choice(("approve", "edit", "reject"))
                self.make(record, other, "web:bob", round(self.rng.uniform(0.0, 40.0), 3))
            case "retry":  # a double click: the same decision produced twice
                made = self.make(record, "approve", "web:bob", think)
                self.world.loop.call_later(think + 0.2, self._produce, made.decision)

    def sweep(self) -> None:
        """The end of the day: every draft still awaiting is approved once (liveness)."""
        for record in self.waiting():
            made = self.swept.get(record.key)
            if made is None or (made in self.applied and self.swept_again(record)):
                made = self.make(record, "approve", "cli:ann", 0.0).decision.decision_id
                self.swept[record.key] = made

    def swept_again(self, record: ReplyRecord) -> bool:
        """A draft awaiting again after its sweep's decision was applied (or refused): at
        most three times for one draft, its key and text. A draft written anew (another
        text: a dead letter's retry answered its burst again) is another draft: a person
        reads it and decides again (finding F48 was the world giving up on the key after
        the refusals of a late draft the new one replaced)."""
        draft = (record.key, record.reply_text)
        self._again[draft] = self._again.get(draft, 0) + 1
        return self._again[draft] <= 3

    def make(self, record: ReplyRecord, action: str, by: str, think_s: float) -> _Made:
        """One decision judged against ``record`` (as read now), produced after ``think_s``
        unless the product's own check says it would move nothing."""
        self._count += 1
        text = f"edited{self._count}" if action == "edit" else None
        reason = "not this" if action == "reject" else None
        act = Action.REJECT if action == "reject" else Action.APPROVE
        decision = decision_for(record, act, by, text=text, reason=reason, at=self.world.now())
        decision = replace(decision, decision_id=f"d{self._count}")  # seeded, not uuid4
        made = self.made[decision.decision_id] = _Made(
            decision, None if act is Action.REJECT else (text or record.reply_text)
        )
        before = judge(record, decision)
        said = f"{action} {record.message_id} ({decision.decision_id}): {before.status}"
        self.world.trace(by, said)
        if before.status is Status.WAITING:
            self.world.loop.call_later(think_s, self._produce, decision)
        else:
            self.applied[decision.decision_id] = False  # not produced: it would move nothing
        return made

    def _produce(self, decision: ApprovalDecision) -> None:
        self.world.trace("people", f"produced {decision.decision_id} for {decision.key}")
        self.world.deliver(decision)

    def landed(self, record: ReplyRecord) -> None:
        """A ledger record carrying a decision landed: the decision was applied, though the
        worker that applied it may die before it answers (an exit after the write)."""
        if record.approval is not None:
            self.applied[record.approval.decision_id] = True

    def applied_as(self, decision: ApprovalDecision, answer: Answer) -> None:
        if answer is Answer.APPLIED:
            self.applied[decision.decision_id] = True
        else:
            self.applied.setdefault(decision.decision_id, False)

    def decisions(self) -> tuple[Decision, ...]:
        """Every decision made, with the text it approved and whether the worker applied it."""
        return tuple(
            Decision(
                made.decision.key,
                "reject" if made.text is None else "approve",
                made.text,
                self.applied.get(made.decision.decision_id),
            )
            for made in self.made.values()
        )


def _order(record: ReplyRecord) -> tuple[str, str]:
    return (record.created_at.isoformat(), record.key)

"""Deciding on drafts from where people work: the CLI, the operator page, the HTTP API.

Every path does the same (:func:`decide`): find the reply's record as the ledger topic
has it now (unknown: :class:`UnknownReply`, nothing produced); judge the decision against
it with the worker's own pure :func:`~onceonly.processors.approval.decisions.apply` (a decision that
cannot move the draft, one that comes after an approval was applied, is answered at once
with the reply's state, and nothing is produced); otherwise produce it to the deliveries
topic, keyed by the thread, and wait (at most ``wait_s``) until the partition's owner has
applied a decision (and sent an approved reply), then judge again: the answer says whether
*this* decision moved the draft or another one did first. Nothing here writes the ledger
or sends mail: the partition's owner alone does, in the thread's order.

The record is found (:func:`reply_finder`) in the operator index when one is built
(ONCEONLY_INDEX_DIR), with the ledger records the index has not read yet, so a decision
is judged on what a whole read would find; else the ledger topic is read whole (fine for
a support inbox's ledger, slow for millions of replies). The answer says which. How the
record is found changes nothing of what is produced: the decision, judged again by the
partition's owner against its own table.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from onceonly.foundation.errors import OnceOnlyError
from onceonly.foundation.settings import Settings
from onceonly.processors.approval.decisions import Answer, apply, approves_answered_apart
from onceonly.schemas.approval import (
    APPROVAL_HEADER,
    APPROVAL_VERSION,
    Action,
    ApprovalDecision,
    draft_digest,
)
from onceonly.schemas.envelope import MAC_HEADER, mac_of
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T = TypeVar("T")

#: how long a decision's maker waits for the worker to apply it, by default
WAIT_S = 30.0
POLL_S = 0.5


class UnknownReply(OnceOnlyError):
    """No reply with this key in the ledger."""


class Status(StrEnum):
    APPLIED = "applied"  #: this decision moved the draft
    ALREADY = "already"  #: the same decision was applied before (another maker's, a retry)
    REFUSED = "refused"  #: the reply is not a draft any more, or is superseded; the state says
    WAITING = "waiting"  #: produced; not applied within the wait (no worker running?)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a decision's maker is told: what became of it and the reply's state."""

    status: Status
    key: str
    state: str
    detail: str
    decision_id: str
    record: ReplyRecord
    answered_by: str = ""  #: where the reply's record was found

    def to_json(self) -> dict[str, Any]:
        approval = self.record.approval
        return {
            "status": self.status.value,
            "key": self.key,
            "state": self.state,
            "detail": self.detail,
            "decision_id": self.decision_id,
            "text": self.record.reply_text,
            "decided_by": approval.by if approval else None,
            "decided_at": approval.at.isoformat() if approval else None,
            "verdict": approval.verdict.value if approval else None,
            "answered_by": self.answered_by,
        }


ReadLedger = Callable[[], Mapping[str, ReplyRecord]]


def ledger_reader(settings: Settings) -> ReadLedger:
    from onceonly.foundation.kafka import Connection
    from onceonly.operations.catchup import read_ledger

    connection = Connection.from_settings(settings)
    return lambda: read_ledger(connection, settings.ledger_topic)


@dataclass(frozen=True, slots=True)
class Found(Generic[T]):
    """An answer, and what answered it (the index, or a whole read), for the reader."""

    value: T
    source: str


FindReply = Callable[[str], Found[ReplyRecord | None]]


def scanned(reason: str) -> str:
    return f"answered by reading the whole ledger topic ({reason})"


def reply_finder(settings: Settings) -> FindReply:
    """A reply's latest record by key: from the index when one is built (checked on every
    call: a worker may start before it), else from the whole ledger topic."""
    from onceonly.operations import index

    whole = ledger_reader(settings)

    def find(key: str) -> Found[ReplyRecord | None]:
        reason = index.no_index_reason(settings)
        if reason is None:
            answer = index.reply(settings, key)
            return Found(answer.value, answer.line())
        return Found(whole().get(key), scanned(reason))

    return find


def waiting_drafts(settings: Settings) -> Found[list[ReplyRecord]]:
    """The drafts awaiting a decision, oldest first: from the index when one is built
    (saying how far behind it is), else from the whole ledger topic."""
    from onceonly.operations import index

    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.approvals(settings)
        return Found(answer.value, answer.line())
    return Found(drafts(ledger_reader(settings)()), scanned(reason))


def drafts(ledger: Mapping[str, ReplyRecord]) -> list[ReplyRecord]:
    """The drafts awaiting a decision, oldest first."""
    waiting = [r for r in ledger.values() if r.state is ReplyState.AWAITING]
    return sorted(waiting, key=lambda r: (r.created_at, r.key))


def decision_for(
    record: ReplyRecord,
    action: Action,
    by: str,
    *,
    text: str | None = None,
    reason: str | None = None,
    at: datetime | None = None,
) -> ApprovalDecision:
    if action is Action.REJECT and not (reason and reason.strip()):
        raise OnceOnlyError("a rejection needs a reason (--reason, or the form's reason)")
    return ApprovalDecision(
        decision_id=uuid.uuid4().hex,
        key=record.key,
        thread_key=record.thread_key,
        action=action,
        by=by,
        at=at or datetime.now(UTC),
        text=text,
        reason=reason,
        draft=draft_digest(record.reply_text),  # the text read: the owner refuses another
    )


def judge(record: ReplyRecord, decision: ApprovalDecision) -> Outcome:
    """What became of ``decision``, from the reply's current record."""
    mine = record.approval is not None and record.approval.decision_id == decision.decision_id
    if mine:
        status, detail = Status.APPLIED, record.state.value
    else:
        applied = apply(record, decision)
        status = {
            Answer.APPLIED: Status.WAITING,
            Answer.ALREADY: Status.ALREADY,
            Answer.REFUSED: Status.REFUSED,
        }[applied.answer]
        detail = applied.detail
    return Outcome(status, record.key, record.state.value, detail, decision.decision_id, record)


Produce = Callable[[ApprovalDecision], Any]


def producer(settings: Settings) -> Produce:
    """Produce a decision to the deliveries topic, keyed by its thread (signed with
    ONCEONLY_ENVELOPE_SECRET when it is set), and wait for the broker's acknowledgement."""
    from onceonly.foundation.kafka import AsyncProducer, Connection

    async def produce(decision: ApprovalDecision) -> None:
        value = decision.encode()
        headers = [(APPROVAL_HEADER, str(APPROVAL_VERSION).encode())]
        if settings.envelope_mac_key is not None:
            headers.append((MAC_HEADER, mac_of(value, settings.envelope_mac_key)))
        kafka = AsyncProducer(Connection.from_settings(settings))
        try:
            await kafka.produce(
                settings.deliveries_topic, value, key=decision.thread_key.encode(), headers=headers
            )
        finally:
            kafka.close()

    return produce


async def decide(
    find: FindReply,
    produce: Produce,
    key: str,
    action: Action,
    by: str,
    *,
    text: str | None = None,
    reason: str | None = None,
    wait_s: float = WAIT_S,
) -> Outcome:
    """Make a decision on the draft ``key`` and say what became of it (module docstring)."""
    found = await asyncio.to_thread(find, key)
    record = found.value
    if record is None:
        raise UnknownReply(
            f"no reply {key} in the ledger ({found.source}); see onceonly approvals list"
        )
    decision = decision_for(record, action, by, text=text, reason=reason)
    before = await _judged(find, record, decision)
    if before.status is not Status.WAITING:
        return replace(before, answered_by=found.source)  # it would move nothing: not produced
    await produce(decision)
    deadline = time.monotonic() + wait_s
    while True:
        found = await asyncio.to_thread(find, key)
        current = found.value or record
        settled = current.state not in (ReplyState.AWAITING, ReplyState.PENDING)
        if settled or time.monotonic() >= deadline:
            return replace(await _judged(find, current, decision), answered_by=found.source)
        await asyncio.sleep(POLL_S)


async def _judged(find: FindReply, record: ReplyRecord, decision: ApprovalDecision) -> Outcome:
    """:func:`judge`, and for an approval it would apply of a draft covering other
    messages, the worker's refusal of one covering a message answered apart
    (:func:`~onceonly.processors.approval.decisions.approves_answered_apart`): one lookup
    of each covered message's reply, until one is answered apart (without an index, each
    a whole read of the ledger topic)."""
    judged = judge(record, decision)
    if judged.status is not Status.WAITING or not record.covers:
        return judged

    def covered(key: str) -> ReplyRecord | None:
        return find(key).value

    refused = await asyncio.to_thread(approves_answered_apart, covered, record, decision)
    if refused is None:
        return judged
    return replace(judged, status=Status.REFUSED, detail=refused.detail)

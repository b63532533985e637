"""Approval: which replies wait for a person, and what a person's decision does to one.

Pure decisions, no I/O: :func:`by_mode` (``ONCEONLY_APPROVAL``) turns a writer's answer
into a :class:`~onceonly.processors.writer.contract.Draft` or not; :func:`apply` decides
what a decision does to the reply's ledger record. The worker applies decisions on the
thread's lane (:mod:`onceonly.processors.approval.applying`).

A draft is recorded *awaiting*. An approval moves it to *pending* with the approved text
(the edit, if any) and the :class:`~onceonly.schemas.approval.Approval` (who, when, what); the
pending record is then sent like any other, with the reply's key. A rejection records it
*declined* with the reason. Whatever comes after the first decision applied changes
nothing: a second approval with the same text is answered with the reply's state (one
email), an edit or a rejection is refused with it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

import structlog

from onceonly.processors.messages import Inbound, ThreadMessage, reply_key
from onceonly.processors.reply.arbitration import unseen_cover
from onceonly.processors.reply.bursts import chain_end, left_drafts
from onceonly.processors.writer.contract import Decline, Draft
from onceonly.schemas.approval import Action, Approval, ApprovalDecision, Verdict, draft_digest
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.approvals")

Written = str | Decline | Draft

ALWAYS_REASON = "ONCEONLY_APPROVAL=always"


def by_mode(mode: str, written: Written) -> Written:
    """The writer's answer under ``ONCEONLY_APPROVAL``: ``always`` makes every text a draft,
    ``writer`` keeps the writer's drafts, ``never`` sends a draft's text as it is."""
    if isinstance(written, Decline):
        return written
    if mode == "always" and isinstance(written, str):
        return Draft(written, ALWAYS_REASON)
    if mode == "never" and isinstance(written, Draft):
        log.info("a Draft sent without approval (ONCEONLY_APPROVAL=never)", reason=written.reason)
        return written.text
    return written


class Answer(StrEnum):
    """What became of a decision."""

    APPLIED = "applied"  #: this decision moved the draft (to pending, or declined)
    ALREADY = "already"  #: the same approval was applied before: nothing more is sent
    REFUSED = "refused"  #: it came too late or names a reply that is not a draft


@dataclass(frozen=True, slots=True)
class Applied:
    """A decision's effect: the record to write (None: nothing to write) and why. A
    ``REFUSED`` answer with a record: the decision named another text than the draft's;
    the draft is written again (:data:`OTHER_DRAFT`)."""

    answer: Answer
    record: ReplyRecord | None
    detail: str


def _state_of(record: ReplyRecord) -> str:
    detail = record.state.value
    if record.approval is not None:
        a = record.approval
        detail += f" ({a.verdict.value} by {a.by} at {a.at.isoformat()})"
    if record.state is ReplyState.COVERED and record.covered_by:
        detail += f"; superseded by the newer reply {record.covered_by}"
    return detail


#: a decision made on another text than the draft's: a late record of a worker whose
#: partition moved (paused past its fence check) showed its own draft for the key after
#: the owner wrote the owner's (the simulator's finding F12); the owner writes its draft
#: again, so the ledger's last word is the text it would send
OTHER_DRAFT = (
    "refused: the draft's text is not the one the decision was made on (the draft "
    "changed); read the draft again and decide on it"
)


#: a decision made on a draft that a worker past its fence check landed after the owner's
#: *failed* record (F23): the owner's record is written again after it
LATE_DRAFT = (
    "; the draft decided on was landed late by a worker that no longer owns the thread: "
    "retry the reply's dead letter to have it written again"
)


def apply(record: ReplyRecord | None, decision: ApprovalDecision) -> Applied:
    """What ``decision`` does to the reply's current ledger ``record``.

    Only a draft (*awaiting*) moves: an approval to *pending* with the approved text, a
    rejection to *declined*. Once a decision was applied, the same approval again (two
    people, a double click, a bot's retry) is ``ALREADY``; an edit to another text, a
    rejection, an approval of a declined draft are ``REFUSED`` with the reply's state.
    A decision that names another text than the draft's (``draft``) is ``REFUSED``, with
    the draft as the record to write again; one made on a draft (``draft``) of a reply
    that is *failed* here is ``REFUSED`` with the failed record to write again.
    """
    if record is None:
        return Applied(Answer.REFUSED, None, f"no reply {decision.key} in the ledger")
    if record.state is not ReplyState.AWAITING:
        if _repeats(record, decision):
            return Applied(Answer.ALREADY, None, _state_of(record))
        refused = f"refused: the reply is {_state_of(record)}"
        if record.state is ReplyState.FAILED and decision.draft is not None:
            # made on a draft the ledger showed after the reply failed here: a late record
            # of a worker past its fence check (the simulator's finding F23); the failed
            # record is written again, so the draft leaves the approvals list
            return Applied(Answer.REFUSED, record, refused + LATE_DRAFT)
        return Applied(Answer.REFUSED, None, refused)
    if decision.draft is not None and decision.draft != draft_digest(record.reply_text):
        return Applied(Answer.REFUSED, record, OTHER_DRAFT)
    if decision.action is not Action.APPROVE:
        timed_out = decision.action is Action.TIME_OUT
        verdict = Verdict.TIMED_OUT if timed_out else Verdict.REJECTED
        why = decision.reason or verdict.value
        approval = Approval(verdict, decision.by, decision.at, decision.decision_id)
        reason = why if timed_out else f"rejected by {decision.by}: {why}"
        declined = record.with_state(ReplyState.DECLINED, reason=reason, approval=approval)
        return Applied(Answer.APPLIED, declined, "declined")
    edited = decision.text is not None and decision.text != record.reply_text
    if decision.text is not None and not decision.text.strip():
        return Applied(Answer.REFUSED, None, "refused: the edited text is empty")
    approval = Approval(
        Verdict.EDITED if edited else Verdict.APPROVED,
        decision.by,
        decision.at,
        decision.decision_id,
        draft_text=record.reply_text if edited else None,
    )
    text = decision.text if edited else record.reply_text
    pending = record.with_state(ReplyState.PENDING, reply_text=text, approval=approval)
    return Applied(Answer.APPLIED, pending, "pending")


def _repeats(record: ReplyRecord, decision: ApprovalDecision) -> bool:
    """Whether ``decision`` only repeats the decision already applied to ``record``."""
    if record.approval is None or record.approval.decision_id == decision.decision_id:
        return record.approval is not None  # the very decision, read again
    if record.approval.verdict is Verdict.REJECTED:
        return decision.action is Action.REJECT
    if record.approval.verdict is Verdict.TIMED_OUT:
        return decision.action is Action.TIME_OUT
    if record.approval.verdict not in (Verdict.APPROVED, Verdict.EDITED):
        return False
    return decision.action is Action.APPROVE and decision.text in (None, record.reply_text)


# -- a newer message of the thread supersedes a waiting draft ---------------------------


def superseded_by(record: ReplyRecord | None, burst: Collection[str]) -> bool:
    """Whether ``record`` is a draft that the burst (its message keys) supersedes: one
    still awaiting, or one marked superseded by a message of this very burst whose new
    reply was not recorded yet (a crash in between)."""
    if record is None or record.approval is not None or record.reply_text is None:
        return False
    if record.state is ReplyState.AWAITING:
        return True
    return record.state is ReplyState.COVERED and record.covered_by in burst


def recallable(draft: ReplyRecord, known: Collection[str]) -> bool:
    """Whether every message ``draft`` covers is among ``known`` (the thread's messages
    before the new reply's target, and the burst's): only then may the new reply supersede
    it, recalling them all. A draft that covers a message newer than the target (written
    after it, the target a late older message) stands: superseded, it would leave that
    message covered by a reply whose writer never saw it (the simulator's finding F47)."""
    return all(key in known for key in draft.covers or ())


def waits_unapproved(record: ReplyRecord | None) -> bool:
    """Whether ``record`` is a draft no decision has reached: the writer may write it again."""
    return record is not None and record.state is ReplyState.AWAITING and record.approval is None


#: the replies that answer (or will, once approved) the messages they cover
_MAY_ANSWER = frozenset({ReplyState.AWAITING, ReplyState.PENDING, ReplyState.SENT})


def covering_reply(
    get: Callable[[str], ReplyRecord | None], draft: ReplyRecord, thread: Sequence[ThreadMessage]
) -> ReplyRecord | None:
    """The reply of another message of ``thread`` (as the mail API lists it, in any order
    and perhaps only its newest part) that covers ``draft``'s message, is a draft, a draft
    approved or sent, and whose writer saw every message ``draft``'s writer saw
    (:func:`~onceonly.processors.reply.bursts.left_drafts`); None if none does. A rejected
    draft or a failed send is left out: approving ``draft`` then answers its message once
    (a failed send's dead letter names only the messages it covered when it failed).

    Two late writers that crossed can leave a draft waiting beside a newer reply that
    covers its message (the simulator's finding F28). The owner's next burst of the thread
    supersedes it; a decision approving the draft before that burst would answer the
    message twice, once by each reply."""
    for message in thread:  # wherever the mail API lists it: its order is not the bursts'
        if message.own or message.message_id == draft.message_id:
            continue
        newer = get(reply_key(draft.inbox_id, message.message_id))
        if newer is None or draft.key not in (newer.covers or ()):
            continue
        if newer.state not in _MAY_ANSWER:  # a rejected draft or a failed send answers none
            continue
        superseded, _ = left_drafts(newer, {key: get(key) for key in newer.covers or ()})
        if any(d.key == draft.key for d in superseded):
            return newer
    return None


def answered_apart(get: Callable[[str], ReplyRecord | None], draft: ReplyRecord | None) -> bool:
    """Whether ``draft`` covers a message whose own reply answers it apart
    (:func:`answers_apart`). A newer message's reply never covers such a message, except
    where two late writers crossed: the older message's draft approved and sent before a
    late writer's newer draft covering it landed (a review of F28's check). Approved, that
    draft would answer the message a second time."""
    found = (get(key) for key in (draft.covers or () if draft is not None else ()))
    return any(answers_apart(r) for r in found)


#: an approval of a draft that covers a message answered apart (F28's third order, the
#: decision before the owner was given the draft's message again)
ANSWERED_APART = (
    "refused: the draft covers a message whose own reply answers it (sent, or on its "
    "way), which it would answer a second time; its own message, processed again, has "
    "it written again without that one: decide on that draft, or reject this one"
)


def approves_answered_apart(
    get: Callable[[str], ReplyRecord | None],
    record: ReplyRecord | None,
    decision: ApprovalDecision,
) -> Applied | None:
    """The refusal of ``decision`` when it approves ``record``, a draft no decision reached
    that covers a message answered apart (:func:`answered_apart`, its covers read with
    ``get``); None otherwise. Such a draft was
    landed late by a writer past its fence check, whose delivery it never committed: the
    owner is given that message again and writes the draft again without the answered
    one (``threads.read_thread``), unless a decision approving the late draft comes
    first (decisions are not held by the reorder window); approved, it would answer that
    message a second time."""
    if (
        decision.action is Action.APPROVE
        and waits_unapproved(record)
        and answered_apart(get, record)
    ):
        return Applied(Answer.REFUSED, None, ANSWERED_APART)
    return None


def answers_apart(record: ReplyRecord | None) -> bool:
    """Whether ``record``'s reply answers its message on its own: *sent*, *pending*, or a
    failed send that kept its text (its dead letter's retry sends it)."""
    if record is None:
        return False
    return record.state in (ReplyState.SENT, ReplyState.PENDING) or (
        record.state is ReplyState.FAILED and record.reply_text is not None
    )


def unseen_marks(
    get: Callable[[str], ReplyRecord | None], keys: Iterable[str]
) -> list[tuple[ReplyRecord, ReplyRecord]]:
    """The drafts among ``keys``' records marked superseded by a newer message whose reply,
    where their chain of covers ends, never saw them (:func:`unseen_cover`, the
    simulator's finding F32): each with that reply's record. Left so, they are covered by
    a reply that never answers them."""
    found = []
    for key in dict.fromkeys(keys):
        mark = get(key)
        end = unseen_cover(get, mark)
        if mark is not None and end is not None:
            found.append((mark, end))
    return found


def attached(
    get: Callable[[str], ReplyRecord | None], keys: Iterable[str], to: Collection[str]
) -> set[str]:
    """The keys among ``keys`` whose records are covered, through their chain, by one of
    ``to`` (drafts written again, new messages): what a rewrite of those recalls, whether
    or not the drafts' writers saw them (F32)."""
    return {k for k in keys if isinstance(chain_end(get, get(k), to), str)}


def owed_anew(
    get: Callable[[str], ReplyRecord | None],
    unseen: Iterable[tuple[ReplyRecord, ReplyRecord]],
    keys: Iterable[str],
) -> set[str]:
    """The messages among ``keys`` owed a reply written anew, for each marked draft of
    ``unseen`` (:func:`unseen_marks`): the draft's message and those covered through it,
    less what the newer reply's writer saw (its own and its ``covers``)."""
    keys, owed = list(keys), set()
    for mark, end in unseen:
        covered = {mark.key, *attached(get, keys, {mark.key})}
        owed |= covered - {end.key, *(end.covers or ())}
    return owed


def seen_by_end(
    get: Callable[[str], ReplyRecord | None],
    unseen: Iterable[tuple[ReplyRecord, ReplyRecord]],
    keys: Iterable[str],
) -> dict[str, str]:
    """The messages among ``keys`` covered through a marked draft of ``unseen`` whose newer
    reply's writer saw them: each with that reply's key, which answers them (their records
    are written again to name it, so the draft's new reply never covers them)."""
    keys, seen = list(keys), {}
    for mark, end in unseen:
        for key in attached(get, keys, {mark.key}) & {*(end.covers or ())}:
            seen[key] = end.key
    return seen


def recall(message: ThreadMessage, like: Inbound) -> Inbound:
    """An earlier message of the thread (from its history) as the writer is given it: before
    ``like`` (the burst's latest), whatever the clocks say, so the reply still answers it."""
    before = like.occurred_at - timedelta(milliseconds=1)
    when = min(message.timestamp, before) if message.timestamp else before
    return replace(
        like,
        message_id=message.message_id,
        event_id=f"recalled:{message.message_id}",
        occurred_at=when,
        sender=message.sender,
        subject=message.subject,
        text=message.text,
        labels=(),
    )


# -- drafts do not wait forever -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Survey:
    """The drafts awaiting a decision on this worker's partitions, as the metrics show them."""

    waiting: int
    oldest_age_s: float  #: 0 with none waiting
    overdue: tuple[ReplyRecord, ...]  #: waiting past the timeout, oldest first


def survey(records: Iterable[ReplyRecord], now: datetime, timeout: timedelta) -> Survey:
    """How many drafts wait, the oldest's age and those past ``timeout``, each measured from
    its ledger record's time (the draft's), so a restart neither resets nor loses it."""
    drafts = sorted(
        (r for r in records if r.state is ReplyState.AWAITING), key=lambda r: r.created_at
    )
    oldest = (now - drafts[0].created_at).total_seconds() if drafts else 0.0
    overdue = tuple(r for r in drafts if now - r.created_at >= timeout)
    return Survey(len(drafts), max(0.0, oldest), overdue)


def timeout_decision(record: ReplyRecord, now: datetime, timeout: timedelta) -> ApprovalDecision:
    """The worker's own decision on an overdue draft (ONCEONLY_APPROVAL_ON_TIMEOUT=decline);
    its id is the draft's, so two workers' (a rebalance) apply once."""
    hours = timeout.total_seconds() / 3600
    return ApprovalDecision(
        decision_id=f"timeout-{record.key}",
        key=record.key,
        thread_key=record.thread_key,
        action=Action.TIME_OUT,
        by="onceonly",
        at=now,
        reason=f"timed out: no decision within ONCEONLY_APPROVAL_TIMEOUT ({hours:g} h)",
    )

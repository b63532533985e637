"""The worker's side of approval: a decision record, applied on its thread's lane.

A decision (:class:`~onceonly.schemas.approval.ApprovalDecision`) comes on the deliveries topic,
keyed by the thread, with the ``onceonly-approval`` header: the partition's owner takes
it in the thread's order, wherever it was made. On the thread's lane (so never beside a
reply of the same thread) :func:`~onceonly.processors.approval.decisions.apply` decides; what it
decides is
written to the ledger (acknowledged, fenced) and then, for a reply now *pending*, the
approved text is sent with the reply's key. The decision record is acknowledged only
after that: a worker killed between the approval and the send leaves the record to the
next owner, which finds the reply *pending* (the same approval again is ``already``) and
sends the stored text with the same key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from onceonly.processors.approval.decisions import (
    Answer,
    answers_apart,
    apply,
    approves_answered_apart,
    attached,
    covering_reply,
    owed_anew,
    recall,
    recallable,
    seen_by_end,
    superseded_by,
    survey,
    timeout_decision,
    unseen_marks,
)
from onceonly.processors.approval.threads import ThreadRead, read_thread
from onceonly.processors.dead_letters import for_reply
from onceonly.processors.exceptions import Rebalancing
from onceonly.processors.lanes import Dropped, Job
from onceonly.processors.messages import Inbound
from onceonly.processors.records import Record
from onceonly.processors.reply.bursts import burst_order, summarize, supersede
from onceonly.processors.reply.once import (
    BurstResult,
    Plan,
    SendPolicy,
    answered_by,
    cover_seen,
    plan,
    reply_once,
    send_recorded,
)
from onceonly.processors.reply.parts import ReplyParts, SendParts, nothing_newer
from onceonly.schemas.approval import APPROVAL_HEADER, APPROVAL_VERSION, Action, ApprovalDecision
from onceonly.schemas.dead_letter import Check
from onceonly.schemas.envelope import MAC_HEADER, Envelope, has_valid_mac, mac_of
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState, state_bytes

if TYPE_CHECKING:
    from onceonly.processors.parts import WorkerParts

__all__ = ["APPROVAL_HEADER", "admit"]

log = structlog.get_logger("onceonly.approvals")

BAD_MAC = (
    "the approval decision has no valid onceonly-mac: forged, or made without "
    "ONCEONLY_ENVELOPE_SECRET; it was not applied"
)


async def admit(parts: WorkerParts, event: Record) -> None:
    """Route one decision record to its thread's lane (an unreadable one is dead-lettered)."""
    partition, offset = event.partition, event.offset
    problem: tuple[str, Check] | None = None
    decision: ApprovalDecision | None = None
    if parts.mac_key is not None and not has_valid_mac(event.value, event.headers, parts.mac_key):
        problem = (BAD_MAC, Check.BAD_MAC)
    else:
        try:
            decision = ApprovalDecision.decode(event.value)
        except SchemaError as exc:
            problem = (str(exc), Check.UNREADABLE)
    if decision is None:
        reason, check = problem or ("no decision", Check.UNREADABLE)
        log.error(
            "approval decision not applied; dead-lettered", partition=partition, offset=offset
        )
        await parts.dead_letters.record_unreadable(event.value, partition, offset, reason, check)
        await parts.lanes.ack_now(event)
        return
    job = Job(_run, [event], kind="approval", item=(parts, decision))
    await parts.lanes.submit(decision.thread_key.encode(), job)


async def _run(job: Job) -> None:
    """A decision's lane job; a fence's refusal drops it (the next owner's to read again)."""
    parts, decision = job.item
    job.records[0].enter()
    try:
        await decide(parts, decision)
    except Rebalancing as exc:
        raise Dropped(str(exc)) from exc


async def decide(parts: WorkerParts, decision: ApprovalDecision) -> ReplyRecord | None:
    """Apply ``decision`` to its reply's record, then send the reply if it is pending."""
    ids = {"key": decision.key, "decision_id": decision.decision_id, "by": decision.by}
    await parts.ledger.taken_over(decision.key)  # a refusal writes the record anew (F39)
    draft = parts.ledger.get(decision.key)
    if decision.action is Action.APPROVE and draft and draft.state is ReplyState.AWAITING:
        await _supersede_if_covered(parts, draft)
    current = parts.ledger.get(decision.key)  # the draft, or its mark just written
    applied = approves_answered_apart(parts.ledger.get, current, decision) or apply(
        current, decision
    )
    parts.metrics.approval_decision(applied.answer.value, applied.record)
    if applied.record is not None:
        # acknowledged before anything is sent; a refused one: the draft, written again
        await parts.ledger.put(applied.record)
    if applied.answer is Answer.APPLIED:
        log.info(
            "approval decision applied", action=decision.action.value, state=applied.detail, **ids
        )
    elif applied.answer is Answer.REFUSED:
        log.warning("approval decision refused", detail=applied.detail, **ids)
    else:
        log.info("approval decision repeated; nothing more to do", state=applied.detail, **ids)
    record: ReplyRecord | None = parts.ledger.get(decision.key)
    if record is None or record.state is not ReplyState.PENDING or record.approval is None:
        return record
    # a decision applied just now: nothing was sent; one read again (a crash came between
    # the approval and the send's record): the thread is read for the reply first
    return await _send(parts, record, reconcile=applied.record is None)


async def _supersede_if_covered(parts: WorkerParts, draft: ReplyRecord) -> None:
    """A draft about to be approved that waits beside a newer reply covering its message
    (:func:`~onceonly.processors.approval.decisions.covering_reply`, the simulator's
    finding F28) is marked superseded by that reply first, so the approval is refused
    naming it: approved, the message would be answered by both. One read of the thread;
    unread, the decision is applied as it comes."""
    try:
        thread = await parts.channels[draft.channel].thread_of(draft)
    except Exception as exc:
        log.warning("thread not read before an approval", key=draft.key, error=repr(exc))
        return
    newer = covering_reply(parts.ledger.get, draft, thread)
    if newer is None:
        return
    await parts.ledger.put(supersede(draft, newer.key))
    parts.metrics.approval_decisions.labels("superseded").inc()
    log.warning(
        "a draft about to be approved is superseded by a newer reply covering its message",
        key=draft.key,
        newer=newer.key,
    )


async def _send(parts: WorkerParts, record: ReplyRecord, reconcile: bool) -> ReplyRecord | None:
    """Send an approved *pending* reply with its stored text and key."""
    channel = parts.channels[record.channel]

    async def dead_letter(failed: ReplyRecord, reason: str, messages: Any) -> None:
        # as the reply path dead-letters a failed send: with the envelopes of every message
        # the reply answers, its own and those recorded covered by it (F11); the draft's
        # burst was settled long ago and its envelopes are kept nowhere, so each is made
        # again from its ledger record, under an event id a retry is processed with
        envelopes = again(parts, answered_by(parts.ledger, failed))
        await for_reply(parts.dead_letters, lambda: envelopes)(failed, reason, envelopes)

    sender = parts.fence.sender(channel.sender) if parts.fence else channel.sender
    send = SendParts(
        ledger=parts.ledger,
        sender=sender,
        dead_letter=dead_letter,
        policy=SendPolicy(
            attempts=parts.settings.send_attempts,
            in_flight_wait_s=parts.settings.send_in_flight_wait_s,
        ),
        on_retry=parts.metrics.send_retries.inc,
        may_retry=parts.flowing,
        arbitrate=parts.ledger.arbitrate,
        unsettled=parts.late_sends.failed,
        # the loop's clock (time.monotonic under asyncio's own loop; the simulator's virtual
        # clock under its loop): how long a 409 in-flight has been retried
        monotonic=asyncio.get_running_loop().time,
    )
    await send_recorded(record, reconcile, send)
    sent: ReplyRecord | None = parts.ledger.get(record.key)
    if sent is not None and sent.state is ReplyState.SENT:
        parts.metrics.replies.inc()
    return sent


def recorded(ledger: Any, messages: Sequence[Inbound]) -> list[ReplyRecord]:
    """The ledger records of ``messages`` (one without a record is left out)."""
    found = (ledger.get(m.key) for m in messages)
    return [r for r in found if r is not None]


def again(parts: WorkerParts, records: Sequence[ReplyRecord]) -> list[Envelope]:
    """The envelopes of ``records``' messages, made again by their channels
    (:meth:`~onceonly.processors.mail.protocol.MailProvider.envelope_again`)."""
    now = parts.now()
    return [parts.channels[r.channel].envelope_again(r, now) for r in records]


async def answer(parts: WorkerParts, burst: Sequence[Inbound], reply: ReplyParts) -> BurstResult:
    """:func:`~onceonly.processors.reply.once.reply_once`, where a newer message
    supersedes a waiting draft.

    With approval on, a burst with a new message (no ledger record) looks through the
    thread's earlier messages (the mail API's thread: one read) for a draft still awaiting
    a decision. Each one found is marked superseded by the burst's latest message
    (acknowledged) *before* the writer is asked again, with the draft's messages (recalled
    from the thread) and the new ones together; a decision on the old draft is then
    refused naming the newer reply. A crash in between leaves the draft marked superseded
    by a message of this burst, which the redelivery finds again (``superseded_by``).

    A burst delivered again (its messages recorded) reads the thread too, for a draft
    marked superseded whose newer reply, landed since by another writer, never saw its
    message (:func:`~onceonly.processors.approval.decisions.unseen_marks`, the simulator's
    finding F32). When that reply is the burst's latest message's draft, no decision yet,
    it is written again with the marked draft's messages recalled (no newer message moves
    it to another key); otherwise the messages that reply saw are recorded covered by it,
    and the others get a reply of their own, as the ledger says after the burst's reply.
    """
    ledger = parts.ledger
    await cover_seen(burst, reply)  # before what is new is judged (F52)
    # new, or written again by a replay (a failed writer's letter: its marks may exist, F14)
    fresh = [m for m in burst if plan(ledger.get(m.key), replay=reply.replay) is Plan.WRITE]
    if parts.settings.approval == "never" or not burst:
        return await reply_once(burst, reply)
    found = await read_thread(parts, burst, fresh, reply)
    if found is None:
        return await reply_once(burst, reply)
    target, by_key, keys = found.target, found.before, {m.key for m in burst}
    new = {m.key for m in found.fresh}
    if not new:
        return await _answer_anew(parts, reply, found, burst, await reply_once(burst, reply))
    known = {*by_key, *keys}  # the thread before the target, and the burst (F47)
    drafts = [r for k in by_key if superseded_by(r := ledger.get(k), new) and r is not None]
    drafts = [d for d in drafts if recallable(d, known)]
    for draft in drafts:
        if draft.state is ReplyState.AWAITING:
            await ledger.put(supersede(draft, target.key))  # before the writer is asked
            parts.metrics.approval_decisions.labels("superseded").inc()
    # the ledger's word after the writes: a draft another writer had approved and sent
    # meanwhile is recorded sent again after the mark (TableLedger._keep_settled), and its
    # messages are answered: never recalled into the new reply (the simulator's F30)
    drafts = [d for d in drafts if superseded_by(ledger.get(d.key), new)]
    for draft in drafts:
        log.info("draft superseded by a newer message", key=draft.key, newer=target.key)
    rewrite = {k for d in drafts for k in (d.key, *(d.covers or ())) if k in by_key}
    # never a message a draft covered whose own reply answers it apart (F28's crossed
    # writers: the older draft sent before a late newer draft covering it landed)
    rewrite = {k for k in rewrite if not answers_apart(ledger.get(k))}
    # and every message whose chain of covers reaches a draft written again or a new
    # message, whether that draft's writer saw it or not (F32)
    rewrite |= attached(ledger.get, [*by_key, *keys], {*rewrite, *new}) | (new & keys)
    recalled = [recall(by_key[k], target) for k in sorted(rewrite) if k not in keys]
    # a draft written again answers its own message: no newer message moves the reply to
    # another key, which would leave that draft waiting beside it (the newer ones come in
    # their own burst, which supersedes it)
    again = replace(reply, newer=nothing_newer) if found.redo else reply
    result = await reply_once([*recalled, *burst], again, rewrite=frozenset(rewrite))
    return await _answer_anew(parts, reply, found, burst, result, rewrite)


#: a draft marked superseded, whose newer reply never saw its messages (F32)
NEVER_SAW = (
    "a draft was marked superseded by a newer reply whose writer never saw its messages; "
    "they are answered anew"
)


async def _answer_anew(
    parts: WorkerParts,
    reply: ReplyParts,
    found: ThreadRead,
    burst: Sequence[Inbound],
    result: BurstResult,
    rewrite: Collection[str] = frozenset(),
) -> BurstResult:
    """``result``, and the reply written anew to the messages of each marked draft that
    the rewrite left out, whose newer reply never saw them (:func:`owed_anew`)."""
    ledger, keys = parts.ledger, [*found.read, *(m.key for m in burst)]
    # the ledger's word after the burst's reply, which may have moved the chains
    unseen = [(m, end) for m, end in unseen_marks(ledger.get, keys) if m.key not in rewrite]
    for key, end in seen_by_end(ledger.get, unseen, keys).items():
        record = ledger.get(key)
        if record is not None and record.state is ReplyState.COVERED:
            await ledger.put(record.with_state(ReplyState.COVERED, covered_by=end))
    owed = owed_anew(ledger.get, unseen, keys) - set(rewrite)
    if not owed:
        return result
    given, latest = {m.key: m for m in burst}, max(burst, key=burst_order)
    messages = [given.get(k) or recall(found.read[k], latest) for k in sorted(owed)]
    log.warning(NEVER_SAW, keys=sorted(owed), newer=[end.key for _, end in unseen])
    again = await reply_once(messages, reply, rewrite=frozenset(owed))
    return summarize([result, again], [])


#: the bytes every awaiting record holds: the sweep decodes no other record
AWAITING = state_bytes(ReplyState.AWAITING)


def sweep_interval_s(timeout_s: float) -> float:
    """How often the drafts are surveyed: a quarter of the timeout, between 1 s and 60 s."""
    return max(1.0, min(60.0, timeout_s / 4))


async def sweep(parts: WorkerParts, acted: set[str]) -> None:
    """Survey the drafts of this worker's partitions (its ledger store): the metrics, and
    for each draft past ONCEONLY_APPROVAL_TIMEOUT a decline (a decision on the thread's
    partition, applied like a person's) or an alert, once per draft (``acted``)."""
    settings, table = parts.settings, parts.ledger.table
    records = [ReplyRecord.decode(raw) for raw in table.values() if AWAITING in raw]
    now = parts.now()
    found = survey(records, now, settings.approval_timeout)
    parts.metrics.drafts(found.waiting, found.oldest_age_s, len(found.overdue))
    for record in found.overdue:
        if record.key in acted:
            continue
        acted.add(record.key)
        age_h = round((now - record.created_at).total_seconds() / 3600, 2)
        if settings.approval_on_timeout == "alert":
            log.error(
                "DRAFT WAITING PAST ONCEONLY_APPROVAL_TIMEOUT: decide on it "
                "(onceonly approvals list / approve / reject)",
                key=record.key,
                age_h=age_h,
                thread_key=record.thread_key,
            )
            continue
        decision = timeout_decision(record, now, settings.approval_timeout)
        value = decision.encode()
        headers = {APPROVAL_HEADER: str(APPROVAL_VERSION).encode()}
        if parts.mac_key is not None:
            headers[MAC_HEADER] = mac_of(value, parts.mac_key)
        await parts.deliveries.send(key=decision.thread_key.encode(), value=value, headers=headers)
        log.warning("draft timed out; declining it", key=record.key, age_h=age_h)

"""The worker's side of approval: a decision record, applied on its thread's lane.

A decision (:class:`~schemas.approval.ApprovalDecision`) comes on the deliveries topic,
keyed by the thread, with the ``onceonly-approval`` header: the partition's owner takes
it in the thread's order, wherever it was made. On the thread's lane (so never beside a
reply of the same thread) :func:`~processors.approvals.apply` decides; what it decides is
written to the ledger (acknowledged, fenced) and then, for a reply now *pending*, the
approved text is sent with the reply's key. The decision record is acknowledged only
after that: a worker killed between the approval and the send leaves the record to the
next owner, which finds the reply *pending* (the same approval again is ``already``) and
sends the stored text with the same key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from processors.approvals import Answer, apply
from processors.faust_app import set_current
from processors.lanes import Job
from processors.reply import Plan, SendPolicy, plan, send_recorded
from schemas.approval import APPROVAL_HEADER, ApprovalDecision
from schemas.envelope import has_valid_mac
from schemas.exceptions import SchemaError
from schemas.ledger import ReplyRecord, ReplyState

if TYPE_CHECKING:
    from processors.pipeline import Pipeline

__all__ = ["APPROVAL_HEADER", "admit"]

log = structlog.get_logger("onceonly.approvals")

BAD_MAC = (
    "the approval decision has no valid onceonly-mac: forged, or made without "
    "ONCEONLY_ENVELOPE_SECRET; it was not applied"
)


async def admit(pipeline: Pipeline, event: Any) -> None:
    """Route one decision record to its thread's lane (an unreadable one is dead-lettered)."""
    message = event.message
    partition, offset = int(message.partition), int(message.offset)
    problem: tuple[str, str] | None = None
    decision: ApprovalDecision | None = None
    if pipeline.mac_key is not None and not has_valid_mac(
        event.value, message.headers or (), pipeline.mac_key
    ):
        problem = (BAD_MAC, "bad_mac")
    else:
        try:
            decision = ApprovalDecision.decode(event.value)
        except SchemaError as exc:
            problem = (str(exc), "unreadable")
    if decision is None:
        reason, check = problem or ("no decision", "unreadable")
        log.error(
            "approval decision not applied; dead-lettered", partition=partition, offset=offset
        )
        await pipeline.dead_letters.record_unreadable(event.value, partition, offset, reason, check)
        await pipeline.lanes.ack_now(event)
        return
    job = Job(_run, [event], kind="approval", item=(pipeline, decision))
    await pipeline.lanes.submit(decision.thread_key.encode(), job)


async def _run(job: Job) -> None:
    pipeline, decision = job.item
    set_current(job.records[0])
    await decide(pipeline, decision)


async def decide(pipeline: Pipeline, decision: ApprovalDecision) -> ReplyRecord | None:
    """Apply ``decision`` to its reply's record, then send the reply if it is pending."""
    ids = {"key": decision.key, "decision_id": decision.decision_id, "by": decision.by}
    applied = apply(pipeline.ledger.get(decision.key), decision)
    pipeline.metrics.approval_decision(applied.answer.value, applied.record)
    if applied.record is not None:
        await pipeline.ledger.put(applied.record)  # acknowledged before anything is sent
        log.info(
            "approval decision applied", action=decision.action.value, state=applied.detail, **ids
        )
    elif applied.answer is Answer.REFUSED:
        log.warning("approval decision refused", detail=applied.detail, **ids)
    else:
        log.info("approval decision repeated; nothing more to do", state=applied.detail, **ids)
    record: ReplyRecord | None = pipeline.ledger.get(decision.key)
    if record is None or record.state is not ReplyState.PENDING or record.approval is None:
        return record
    return await _send(pipeline, record)


async def _send(pipeline: Pipeline, record: ReplyRecord) -> ReplyRecord | None:
    """Send an approved *pending* reply with its stored text and key."""
    channel = pipeline.channels[record.channel]

    async def dead_letter(failed: ReplyRecord, reason: str, messages: Any) -> None:
        await pipeline.dead_letters.record_reply(failed, reason, [])

    sender = pipeline.fence.sender(channel.sender) if pipeline.fence else channel.sender
    step = plan(record, now=pipeline.now(), key_lifetime=channel.key_lifetime)
    await send_recorded(
        record,
        step is Plan.RECONCILE,
        ledger=pipeline.ledger,
        sender=sender,
        dead_letter=dead_letter,
        policy=SendPolicy(attempts=pipeline.settings.send_attempts),
        on_retry=pipeline.metrics.send_retries.inc,
        may_retry=pipeline.flowing,
    )
    sent: ReplyRecord | None = pipeline.ledger.get(record.key)
    if sent is not None and sent.state is ReplyState.SENT:
        pipeline.metrics.replies.inc()
    return sent

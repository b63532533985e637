"""A lane acts on a ledger partition's records only after the partition's take-over (the
simulator's findings F38, F39): a record the worker recovered may be a late one, landed
by a writer past its fence check after the last owner's newer record, which the owner
stopped before it could write its own again. The take-over writes that newer record
again; a burst or a decision that read the store first would act on the late one (send
its text, or write it again made anew, where no take-over can tell it late any more)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from onceonly.ingest import normalise
from onceonly.processors.approval import applying
from onceonly.processors.approval.applying import decide
from onceonly.processors.conversation import Conversation
from onceonly.processors.exceptions import Fenced
from onceonly.processors.lanes import Dropped, Job
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.take_over import TakeOvers
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.approval import Action, ApprovalDecision
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.ledger import MemoryLedger
from tests.unit.processors._pipeline import mail_pipeline

INBOX = "support@agentmail.to"


def _delivery(mail: FakeAgentMail) -> Delivery:
    message_id, at = "<m1@example.com>", "2026-11-29T10:01:00.000Z"
    mail.seed_message(INBOX, message_id=message_id, thread_id="thr-a", timestamp=at)
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-a", message_id=message_id, timestamp=at
    )
    return Delivery(normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC)), (3, 1))


async def _recovered_late(
    mail: FakeAgentMail, approval: str, late: ReplyState
) -> tuple[Conversation, Delivery, ReplyRecord, list[int]]:
    """A new owner whose store holds a late ``late`` record of m1's reply; its partition's
    take-over writes the owner's *sent* record again (the partitions it took over: the
    list returned)."""
    write = Writer(lambda burst: "a new text", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(mail, approval, writer=write)
    delivery = _delivery(mail)
    (inbound,) = await pipeline._inbounds([delivery], {})
    ledger: MemoryLedger = pipeline.parts.ledger  # type: ignore[assignment]
    base = ReplyRecord(
        inbound.key, inbound.inbox_id, inbound.message_id, inbound.thread_key, late,
        datetime.now(UTC), "a late writer's text",
    )  # fmt: skip
    await ledger.put(base)
    sent = base.with_state(ReplyState.SENT, reply_text="the owner's text", sent_message_id="<r@x>")
    taken: list[int] = []

    async def tail(partition: int) -> tuple[int, int]:
        return 0, 2

    async def take(partition: int, first: int, end: int) -> None:
        taken.append(partition)
        await ledger.put(sent)

    ledger.take_overs = TakeOvers(tail, take)
    return pipeline, delivery, sent, taken


async def test_a_burst_reads_its_records_after_the_partitions_take_over(
    mail: FakeAgentMail,
) -> None:
    pipeline, delivery, _, taken = await _recovered_late(mail, "never", ReplyState.PENDING)
    outcomes: dict[str, bool] = {}

    await pipeline.act([delivery], outcomes)

    assert (taken, mail.outbox, outcomes) == ([3], [], {delivery.envelope.event_id: True})


async def test_a_decision_reads_its_record_after_the_partitions_take_over(
    mail: FakeAgentMail,
) -> None:
    pipeline, _, sent, taken = await _recovered_late(mail, "always", ReplyState.AWAITING)
    ledger: MemoryLedger = pipeline.parts.ledger  # type: ignore[assignment]
    ledger.taken_over = lambda key: ledger.take_overs.once(3)  # type: ignore[method-assign]
    decision = ApprovalDecision(
        "d-1", sent.key, "agentmail:thr-a", Action.APPROVE, "ana", datetime.now(UTC)
    )

    after = await decide(pipeline.parts, decision)

    # the late draft is not written again, made anew: the key's last word is its email
    assert (taken, mail.outbox, after, ledger.writes[-1]) == ([3], [], sent, sent)


async def test_a_decision_whose_partition_moved_is_dropped_not_the_workers_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a fence's refusal (its take-over's repair, or its record's) in a decision's lane job:
    # the record is the next owner's to read again; escaping, it would end the worker
    async def moved(parts: object, decision: object) -> None:
        raise Fenced("a take-over's repair: the partition moved")

    monkeypatch.setattr(applying, "decide", moved)
    entered: list[int] = []
    record = SimpleNamespace(enter=lambda: entered.append(1))
    job = Job(applying._run, [record], kind="approval", item=(None, None))

    with pytest.raises(Dropped, match="the partition moved"):
        await job.run(job)

    assert entered == [1]

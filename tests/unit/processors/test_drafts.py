"""Drafts: a writer's Draft, ONCEONLY_APPROVAL, and an awaiting record never written again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from onceonly.processors.approval.decisions import ALWAYS_REASON, by_mode
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.reply.once import (
    Outcome,
    Plan,
    SendPolicy,
    plan,
    reply_once,
)
from onceonly.processors.writer.contract import Decline, Draft, Inbound
from onceonly.processors.writer.runner import Writer, outcome_of
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.ledger import MemoryLedger
from tests.unit.processors._messages import INBOX, received
from tests.unit.processors._replying import reply_parts

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _inbound(message_id: str, minute: int = 0) -> Inbound:
    at = T0 + timedelta(minutes=minute)
    refund = {"subject": "Refund", "text": "I want my money back", "labels": ()}
    return received(message_id, at, sender="Customer <c@example.com>", **refund)


@pytest.mark.parametrize(
    ("mode", "written", "expected"),
    [
        ("never", "hello", "hello"),
        ("never", Draft("hello", "refund"), "hello"),
        ("writer", "hello", "hello"),
        ("writer", Draft("hello", "refund"), Draft("hello", "refund")),
        ("always", "hello", Draft("hello", ALWAYS_REASON)),
        ("always", Draft("hello", "refund"), Draft("hello", "refund")),
        ("always", Decline("spam"), Decline("spam")),
    ],
)
def test_the_approval_mode_decides_what_waits(
    mode: str, written: str | Draft | Decline, expected: str | Draft | Decline
) -> None:
    assert by_mode(mode, written) == expected


def test_a_draft_is_a_writers_answer_but_an_empty_one_is_not() -> None:
    assert outcome_of(Draft("hi", "refund")) == Draft("hi", "refund")
    with pytest.raises(Exception, match="Draft"):
        outcome_of(Draft("  ", "refund"))


async def test_the_writer_step_passes_a_draft_on() -> None:
    writer = Writer(lambda burst: Draft("Refund approved?", "refund mentioned"))

    assert await writer.write([_inbound("<m1@x>")]) == Draft("Refund approved?", "refund mentioned")
    writer.close()


def _awaiting(created: datetime = T0) -> ReplyRecord:
    return ReplyRecord("k", INBOX, "<m@x>", "agentmail:thr_1", ReplyState.AWAITING, created, "d")


def test_an_awaiting_draft_is_skipped_even_on_a_replay() -> None:
    assert plan(_awaiting()) is Plan.SKIP_AWAITING
    assert plan(_awaiting(), replay=True) is Plan.SKIP_AWAITING


def test_an_approved_draft_is_finished_like_any_pending_reply() -> None:
    approved = _awaiting(T0 - timedelta(hours=30)).with_state(
        ReplyState.PENDING, approval=Approval(Verdict.APPROVED, "ana", T0, "d-1")
    )

    assert plan(approved) is Plan.RECONCILE


async def test_a_draft_is_recorded_awaiting_with_its_covers_and_not_sent(
    mail: FakeAgentMail,
) -> None:
    ledger = MemoryLedger()
    calls: list[int] = []

    def writer(burst: Sequence[Inbound]) -> Draft:
        calls.append(len(burst))
        return Draft("We will refund you.", "refund mentioned")

    for message_id in ("<m1@x>", "<m2@x>"):
        mail.seed_message(INBOX, message_id=message_id, thread_id="thr_1")
    burst = [_inbound("<m1@x>"), _inbound("<m2@x>", minute=1)]
    sender = AgentMailSender("k", base_url=mail.base_url, timeout_s=5)

    async def run() -> Outcome:
        parts = reply_parts(
            ledger, sender, writer, _no_dead_letter, lambda: T0, policy=SendPolicy(attempts=1)
        )
        result = await reply_once(burst, parts)
        return result.outcome

    assert [await run(), await run()] == [Outcome.AWAITING, Outcome.AWAITING]

    draft = ledger.records[burst[1].key]
    assert (draft.state, draft.reply_text, draft.reason) == (
        ReplyState.AWAITING,
        "We will refund you.",
        "refund mentioned",
    )
    assert draft.covers == (burst[0].key,)
    assert ledger.records[burst[0].key].covered_by == burst[1].key
    assert calls == [2]  # the model is not asked again for a waiting draft
    assert mail.outbox == []


async def _no_dead_letter(*args: object) -> None:
    raise AssertionError("nothing is dead-lettered here")

"""What a person's decision does to a draft's ledger record: pure, no broker."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from onceonly.processors.approval.decisions import OTHER_DRAFT, Answer, apply
from onceonly.schemas.approval import Action, ApprovalDecision, Verdict, draft_digest
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DRAFT = ReplyRecord(
    "reply-k", "inbox", "<m@x>", "agentmail:t", ReplyState.AWAITING, T0, "draft text", reason="r"
)


def _decision(
    action: Action = Action.APPROVE,
    *,
    text: str | None = None,
    by: str = "ana",
    ident: str = "d-1",
    reason: str | None = None,
) -> ApprovalDecision:
    at = T0 + timedelta(minutes=5)
    return ApprovalDecision(ident, DRAFT.key, DRAFT.thread_key, action, by, at, text, reason)


def test_an_approval_moves_the_draft_to_pending_with_its_text_and_who() -> None:
    applied = apply(DRAFT, _decision())

    assert applied.answer is Answer.APPLIED
    record = applied.record
    assert record is not None
    assert (record.state, record.reply_text) == (ReplyState.PENDING, "draft text")
    assert record.approval is not None
    assert (record.approval.verdict, record.approval.by) == (Verdict.APPROVED, "ana")
    assert record.approval.at == T0 + timedelta(minutes=5)
    assert record.approval.draft_text is None
    assert record.created_at == T0  # the draft's time stays: the timeout counts from it


def test_an_edit_sends_the_edited_text_and_keeps_the_draft() -> None:
    record = apply(DRAFT, _decision(text="edited text")).record

    assert record is not None
    assert (record.state, record.reply_text) == (ReplyState.PENDING, "edited text")
    assert record.approval is not None
    assert (record.approval.verdict, record.approval.draft_text) == (Verdict.EDITED, "draft text")


def test_an_edit_to_the_same_text_is_an_approval() -> None:
    record = apply(DRAFT, _decision(text="draft text")).record

    assert record is not None and record.approval is not None
    assert record.approval.verdict is Verdict.APPROVED


def test_an_empty_edit_is_refused() -> None:
    applied = apply(DRAFT, _decision(text="   "))

    assert (applied.answer, applied.record) == (Answer.REFUSED, None)


def test_a_rejection_declines_with_the_reason_and_who() -> None:
    record = apply(DRAFT, _decision(Action.REJECT, reason="wrong refund amount")).record

    assert record is not None and record.approval is not None
    assert record.state is ReplyState.DECLINED
    assert record.reason == "rejected by ana: wrong refund amount"
    assert record.approval.verdict is Verdict.REJECTED


@pytest.mark.parametrize(
    ("action", "text"),
    [(Action.APPROVE, None), (Action.APPROVE, "edited"), (Action.REJECT, None)],
    ids=["approve", "edit", "reject"],
)
def test_a_decision_made_on_another_text_is_refused_and_the_draft_written_again(
    action: Action, text: str | None
) -> None:
    # finding F12: people read a paused worker's late draft (the ledger topic's last
    # word) while the owner holds its own; the owner must not send a text nobody approved
    decision = replace(
        _decision(action, text=text, reason="no"), draft=draft_digest("the zombie's draft")
    )

    applied = apply(DRAFT, decision)

    assert (applied.answer, applied.record, applied.detail) == (Answer.REFUSED, DRAFT, OTHER_DRAFT)


def test_a_decision_on_a_draft_of_a_reply_failed_here_writes_the_failed_record_again() -> None:
    # F23: a worker past its fence check landed its draft after the owner's failed record;
    # the approvals list showed it, and the owner refused every approval of it
    failed = replace(DRAFT, state=ReplyState.FAILED, reply_text=None, reason=None)
    decision = replace(_decision(), draft=draft_digest("the late draft"))

    applied = apply(failed, decision)

    assert (applied.answer, applied.record) == (Answer.REFUSED, failed)
    assert applied.detail.startswith("refused: the reply is failed")


def test_a_decision_naming_no_draft_on_a_failed_reply_writes_nothing() -> None:
    failed = replace(DRAFT, state=ReplyState.FAILED, reply_text=None, reason=None)

    applied = apply(failed, _decision())

    assert (applied.answer, applied.record) == (Answer.REFUSED, None)


def test_a_decision_made_on_the_drafts_text_or_naming_none_is_applied() -> None:
    named = replace(_decision(), draft=draft_digest("draft text"))

    for decision in (named, _decision()):  # None: a decision made before drafts were named
        applied = apply(DRAFT, decision)
        assert applied.answer is Answer.APPLIED
        assert applied.record is not None and applied.record.reply_text == "draft text"


def test_a_decision_names_its_draft_through_the_record() -> None:
    decision = replace(_decision(), draft=draft_digest("draft text"))

    assert ApprovalDecision.decode(decision.encode()) == decision
    assert ApprovalDecision.decode(_decision().encode()).draft is None


def _approved(text: str | None = None) -> ReplyRecord:
    record = apply(DRAFT, _decision(text=text)).record
    assert record is not None
    return record


def test_a_second_approval_changes_nothing_whatever_the_state() -> None:
    for state in (ReplyState.PENDING, ReplyState.SENT):
        approved = _approved().with_state(state)

        applied = apply(approved, _decision(by="bob", ident="d-2"))

        assert (applied.answer, applied.record) == (Answer.ALREADY, None)
        assert "approved by ana" in applied.detail


def test_the_same_decision_read_again_changes_nothing() -> None:
    approved = _approved(text="edited")

    assert apply(approved, _decision(text="edited")).answer is Answer.ALREADY


def test_an_edit_after_the_first_approval_is_refused_with_the_state() -> None:
    sent = _approved().with_state(ReplyState.SENT, sent_message_id="<s@x>")

    applied = apply(sent, _decision(text="a late edit", by="bob", ident="d-2"))

    assert (applied.answer, applied.record) == (Answer.REFUSED, None)
    assert applied.detail.startswith("refused: the reply is sent (approved by ana")


def test_a_rejection_after_an_approval_is_refused() -> None:
    applied = apply(_approved(), _decision(Action.REJECT, ident="d-2", reason="no"))

    assert applied.answer is Answer.REFUSED


def test_an_approval_after_a_rejection_is_refused() -> None:
    rejected = apply(DRAFT, _decision(Action.REJECT, reason="no")).record

    applied = apply(rejected, _decision(ident="d-2"))

    assert applied.answer is Answer.REFUSED
    assert "declined (rejected by ana" in applied.detail


def test_a_decision_on_a_reply_that_was_never_a_draft_is_refused() -> None:
    sent = DRAFT.with_state(ReplyState.SENT)

    assert apply(sent, _decision()).answer is Answer.REFUSED
    assert apply(None, _decision()).answer is Answer.REFUSED


def test_a_decision_on_a_superseded_draft_names_the_newer_one() -> None:
    superseded = DRAFT.with_state(ReplyState.COVERED, covered_by="reply-newer")

    applied = apply(superseded, _decision())

    assert applied.answer is Answer.REFUSED
    assert "superseded by the newer reply reply-newer" in applied.detail


def test_a_recalled_message_comes_before_the_newer_one_whatever_the_clocks() -> None:
    from onceonly.processors.approval.decisions import recall
    from onceonly.processors.writer.contract import Inbound, ThreadMessage

    newer = Inbound("i", "<m2@x>", "agentmail:t", "t", "evt-2", T0, "c@x", "Hi", "second")
    skewed = ThreadMessage("<m1@x>", "c@x", "first", T0 + timedelta(hours=1))

    recalled = recall(skewed, newer)

    assert recalled.occurred_at < newer.occurred_at
    assert (recalled.message_id, recalled.text, recalled.thread_key) == (
        "<m1@x>",
        "first",
        "agentmail:t",
    )
    assert recall(
        ThreadMessage("<m0@x>", "c@x", "x", T0 - timedelta(days=1)), newer
    ).occurred_at == (T0 - timedelta(days=1))


def test_drafts_are_surveyed_from_their_ledger_time() -> None:
    from onceonly.processors.approval.decisions import survey

    old = DRAFT.with_state(ReplyState.AWAITING, key="reply-old", created_at=T0)
    new = DRAFT.with_state(
        ReplyState.AWAITING, key="reply-new", created_at=T0 + timedelta(hours=23)
    )
    sent = DRAFT.with_state(ReplyState.SENT, key="reply-sent", created_at=T0 - timedelta(days=3))

    found = survey([new, sent, old], T0 + timedelta(hours=24), timedelta(hours=24))

    assert (found.waiting, found.oldest_age_s) == (2, 24 * 3600)
    assert [r.key for r in found.overdue] == ["reply-old"]
    assert survey([], T0, timedelta(hours=1)).oldest_age_s == 0


def test_a_timed_out_draft_is_declined_once_and_a_late_approval_refused() -> None:
    from onceonly.processors.approval.decisions import timeout_decision

    decision = timeout_decision(DRAFT, T0 + timedelta(hours=24), timedelta(hours=24))
    applied = apply(DRAFT, decision)
    record = applied.record
    assert record is not None and record.approval is not None

    assert (record.state, record.approval.verdict) == (ReplyState.DECLINED, Verdict.TIMED_OUT)
    assert record.reason == "timed out: no decision within ONCEONLY_APPROVAL_TIMEOUT (24 h)"
    assert apply(record, timeout_decision(DRAFT, T0, timedelta(hours=24))).answer is Answer.ALREADY
    assert apply(record, _decision(ident="d-9")).answer is Answer.REFUSED
    approved = _approved()
    assert apply(approved, decision).answer is Answer.REFUSED  # a person was first


def test_the_drafts_are_surveyed_a_quarter_timeout_apart_within_bounds() -> None:
    from onceonly.processors.approval.applying import sweep_interval_s

    assert [sweep_interval_s(s) for s in (2, 40, 86400)] == [1.0, 10.0, 60.0]

"""The approval API's pure parts: the token, the body, and what a maker is told."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from onceonly.operations.approvals import Status, decision_for, drafts, judge
from onceonly.operations.approvals_web import bearer, parse_decision, token_refusal
from onceonly.processors.approval.decisions import apply
from onceonly.schemas.approval import Action
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DRAFT = ReplyRecord("reply-k", "i", "<m@x>", "agentmail:t", ReplyState.AWAITING, T0, "draft")


def test_the_token_comes_from_the_form_or_a_bearer_header() -> None:
    assert bearer("tok", None) == "tok"
    assert bearer(None, "Bearer tok") == "tok"
    assert bearer(None, "Basic tok") is None
    assert bearer(None, None) is None


@pytest.mark.parametrize(
    ("expected", "given", "refused"),
    [
        ("s3cret", "s3cret", False),
        ("s3cret", "wrong", True),
        ("s3cret", None, True),
        (None, "x", True),
    ],
)
def test_only_the_operator_token_may_decide(
    expected: str | None, given: str | None, refused: bool
) -> None:
    assert (token_refusal(expected, given) is not None) is refused


def test_a_body_names_the_action_and_who() -> None:
    assert parse_decision({"action": "approve", "by": "ana"}) == (Action.APPROVE, "ana", None, None)
    assert parse_decision({"action": "approve", "by": "ana", "text": ""})[2] is None
    assert parse_decision({"action": "reject", "by": "bot", "reason": "no"})[3] == "no"


@pytest.mark.parametrize(
    "body",
    [
        {"action": "maybe", "by": "ana"},
        {"action": "approve"},
        {"action": "reject", "by": "ana"},
        {"action": "approve", "by": "ana", "text": 42},
    ],
)
def test_a_body_that_is_not_a_decision_is_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        parse_decision(body)


def test_the_maker_is_told_whether_its_own_decision_moved_the_draft() -> None:
    mine = decision_for(DRAFT, Action.APPROVE, "ana", text="edited")
    theirs = decision_for(DRAFT, Action.APPROVE, "bob", text="bob's words")
    applied = apply(DRAFT, theirs).record
    assert applied is not None

    assert judge(DRAFT, mine).status is Status.WAITING  # not yet applied: it is produced
    assert judge(applied, theirs).status is Status.APPLIED
    refused = judge(applied, mine)
    assert refused.status is Status.REFUSED
    assert refused.state == "pending"
    assert "edited by bob" in refused.detail


def test_a_rejection_needs_a_reason() -> None:
    with pytest.raises(Exception, match="reason"):
        decision_for(DRAFT, Action.REJECT, "ana")


def test_drafts_are_listed_oldest_first_and_only_drafts() -> None:
    later = ReplyRecord(
        "reply-a", "i", "<n@x>", "agentmail:t", ReplyState.AWAITING, T0.replace(hour=11)
    )
    ledger = {
        "reply-a": later,
        "reply-k": DRAFT,
        "reply-s": ReplyRecord("reply-s", "i", "<s@x>", "agentmail:t", ReplyState.SENT, T0),
    }

    assert [r.key for r in drafts(ledger)] == ["reply-k", "reply-a"]

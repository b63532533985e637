"""The approval API's pure parts: the token, the body, and what a maker is told."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from onceonly.operations.approvals import (
    FindReply,
    Found,
    Status,
    UnknownReply,
    decide,
    decision_for,
    drafts,
    judge,
)
from onceonly.operations.approvals_web import bearer, parse_decision, token_refusal
from onceonly.processors.approval.decisions import ANSWERED_APART, OTHER_DRAFT, apply
from onceonly.schemas.approval import Action, ApprovalDecision, draft_digest
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


def test_a_decision_names_the_draft_read_and_is_refused_on_another() -> None:
    # finding F12: the text read (a paused worker's late draft) is not the owner's
    decision = decision_for(DRAFT, Action.APPROVE, "ana")
    owners = dataclasses.replace(DRAFT, reply_text="the owner's draft")

    assert decision.draft == draft_digest("draft")
    assert judge(DRAFT, decision).status is Status.WAITING
    assert (judge(owners, decision).status, judge(owners, decision).detail) == (
        Status.REFUSED,
        OTHER_DRAFT,
    )


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


def _finder(*answers: ReplyRecord | None) -> tuple[list[str], FindReply]:
    """Answers in turn (the last repeats), each saying which call found it."""
    asked: list[str] = []

    def find(key: str) -> Found[ReplyRecord | None]:
        asked.append(key)
        n = min(len(asked), len(answers)) - 1
        return Found(answers[n], f"source {len(asked)}")

    return asked, find


async def test_a_decision_is_judged_on_the_record_found_and_says_what_found_it() -> None:
    produced: list[ApprovalDecision] = []

    async def produce(decision: ApprovalDecision) -> None:
        produced.append(decision)

    sent = dataclasses.replace(DRAFT, state=ReplyState.SENT)
    _, settled = _finder(sent)
    refused = await decide(settled, produce, "reply-k", Action.APPROVE, "ana", wait_s=0)
    assert (refused.status, refused.answered_by, produced) == (Status.REFUSED, "source 1", [])
    assert refused.to_json()["answered_by"] == "source 1"

    asked, waiting = _finder(DRAFT)
    outcome = await decide(waiting, produce, "reply-k", Action.APPROVE, "ana", wait_s=0)
    assert [d.key for d in produced] == ["reply-k"]  # the draft was found: produced once
    assert (outcome.status, outcome.answered_by, asked) == (
        Status.WAITING,
        "source 2",  # the record judged after the wait: found again
        ["reply-k", "reply-k"],
    )


async def test_a_reply_nothing_finds_is_unknown_and_nothing_is_produced() -> None:
    produced: list[ApprovalDecision] = []

    async def produce(decision: ApprovalDecision) -> None:
        produced.append(decision)

    _, nothing = _finder(None)
    with pytest.raises(UnknownReply, match=r"no reply reply-x in the ledger \(source 1\)"):
        await decide(nothing, produce, "reply-x", Action.APPROVE, "ana")
    assert produced == []


@pytest.mark.parametrize(
    ("covered", "status"),
    [(ReplyState.SENT, Status.REFUSED), (ReplyState.COVERED, Status.WAITING)],
    ids=["answered-apart", "covered-by-it"],
)
async def test_approving_a_draft_covering_a_message_answered_apart_is_refused_at_once(
    covered: ReplyState, status: Status
) -> None:
    # the worker refuses it (F28's third order, the decision first); the maker is told so
    # at once, nothing produced, rather than after the wait
    produced: list[ApprovalDecision] = []

    async def produce(decision: ApprovalDecision) -> None:
        produced.append(decision)

    draft = dataclasses.replace(DRAFT, covers=("reply-older",))
    older = dataclasses.replace(DRAFT, key="reply-older", state=covered, covered_by="reply-k")

    def find(key: str) -> Found[ReplyRecord | None]:
        return Found({"reply-k": draft, "reply-older": older}.get(key), "source")

    outcome = await decide(find, produce, "reply-k", Action.APPROVE, "ana", wait_s=0)

    assert outcome.status is status
    assert len(produced) == (status is Status.WAITING)
    assert (outcome.detail == ANSWERED_APART) is (status is Status.REFUSED)


async def test_an_approval_refused_past_the_makers_check_is_said_refused_after_the_wait() -> None:
    # the covered message's own reply was sent between the maker's check and the worker's:
    # the worker refuses it and writes nothing; the maker is told so, not "no worker"
    produced: list[ApprovalDecision] = []

    async def produce(decision: ApprovalDecision) -> None:
        produced.append(decision)

    draft = dataclasses.replace(DRAFT, covers=("reply-older",))
    older = dataclasses.replace(DRAFT, key="reply-older", state=ReplyState.COVERED)
    ledger = {"reply-k": draft, "reply-older": older}

    def find(key: str) -> Found[ReplyRecord | None]:
        if produced:
            ledger["reply-older"] = dataclasses.replace(older, state=ReplyState.SENT)
        return Found(ledger.get(key), "source")

    outcome = await decide(find, produce, "reply-k", Action.APPROVE, "ana", wait_s=0)

    assert (outcome.status, outcome.detail, len(produced)) == (Status.REFUSED, ANSWERED_APART, 1)

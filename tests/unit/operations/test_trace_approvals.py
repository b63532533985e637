"""``onceonly trace`` of a draft: what was drafted, the decision, who made it, what was sent."""

from __future__ import annotations

from datetime import UTC, datetime

from onceonly.operations.trace.render import approval_rows
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DRAFT = ReplyRecord("reply-k", "i", "<m@x>", "agentmail:t", ReplyState.AWAITING, T0, "drafted")


def test_a_waiting_draft_says_since_when() -> None:
    assert approval_rows(DRAFT) == [("draft", "awaiting a decision since 2026-12-02 10:00:00.000")]


def test_an_edited_and_sent_draft_shows_the_draft_the_decision_and_the_sent_text() -> None:
    edited = Approval(Verdict.EDITED, "ana", T0, "d-1", draft_text="drafted")
    sent = DRAFT.with_state(ReplyState.SENT, reply_text="edited", approval=edited)

    rows = dict(approval_rows(sent))

    assert rows["draft"] == "drafted"
    assert rows["decision"] == "edited by ana at 2026-12-02 10:00:00.000"
    assert rows["sent text"] == "edited"


def test_a_reply_that_never_was_a_draft_has_no_approval_rows() -> None:
    assert approval_rows(DRAFT.with_state(ReplyState.SENT)) == []

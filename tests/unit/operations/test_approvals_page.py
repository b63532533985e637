"""The operator page's drafts: listed with an edit box and the decision buttons, escaped."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from onceonly.operations.approvals_view import decided_notice, draft_rows
from onceonly.operations.ops_template import render
from onceonly.operations.ops_view import Health, OpsView, Read
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>'
DRAFT = ReplyRecord(
    "reply-abc",
    "inbox",
    "<m2@x>",
    "agentmail:thr",
    ReplyState.AWAITING,
    T0,
    f"We refund you {HOSTILE}",
    reason="refund mentioned",
    covers=("reply-older",),
)


def _view(drafts: Read[list[object]] | None) -> OpsView:
    view = OpsView(
        app_id="onceonly",
        writable=True,
        webhook=Health("ok", "fine"),
        letters=Read([]),
        lag=Read([]),
        skips=None,
        trace_available=False,
    )
    return dataclasses.replace(view, drafts=drafts)


def test_a_draft_row_says_what_it_answers_why_and_how_old() -> None:
    [row] = draft_rows([DRAFT], T0 + timedelta(minutes=90))

    assert (row.key, row.message_id, row.covers) == ("reply-abc", "<m2@x>", ("reply-older",))
    assert (row.reason, row.age) == ("refund mentioned", "90 min")


def test_a_draft_is_listed_with_its_text_in_an_edit_box_and_two_buttons() -> None:
    html = render(_view(Read(list(draft_rows([DRAFT], T0)))))

    assert '<form method="post" action="/approvals/reply-abc">' in html
    assert "We refund you &lt;script&gt;" in html and HOSTILE not in html
    assert '<textarea name="text"' in html
    assert 'name="action" value="approve"' in html and 'name="action" value="reject"' in html
    assert 'name="token"' in html
    assert "and 1 earlier message(s)" in html


def test_no_drafts_and_an_unreadable_ledger_are_said_so() -> None:
    assert "No drafts awaiting approval." in render(_view(Read([])))
    assert "could not read the ledger" in render(_view(Read(error="could not read the ledger")))
    assert "Drafts: not available." in render(_view(None))


def test_after_a_decision_the_page_says_what_became_of_it() -> None:
    notice = decided_notice({"decided": "refused", "key": "reply-abc", "state": "sent"})

    assert (
        notice
        == "decision on reply-abc: refused: the reply is no longer a draft; the reply is sent"
    )
    assert decided_notice({}) is None

"""A burst whose thread cannot be read, with approval on (the simulator's finding F43):
answered alone only when the ledger holds no draft its reply would have to recall."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from onceonly.processors.approval.threads import needing_thread, of_thread, unread
from onceonly.processors.exceptions import ThreadUnread
from onceonly.processors.messages import Inbound, reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 1, tzinfo=UTC)
THREAD = "agentmail:thr-a"
M2 = reply_key("inbox", "<m2@x>")


def _inbound(message_id: str) -> Inbound:
    return Inbound("inbox", message_id, THREAD, "thr-a", f"ev-{message_id}", T0, "a@x", None, "hi")


def _record(message_id: str, state: ReplyState, text: str | None = None, **kw: Any) -> ReplyRecord:
    key = reply_key("inbox", message_id)
    return ReplyRecord(key, "inbox", message_id, kw.pop("thread", THREAD), state, T0, text, **kw)


def _parts(*records: ReplyRecord) -> Any:
    store = {r.key: r for r in records}
    table = SimpleNamespace(values=lambda: [r.encode() for r in store.values()])
    ledger = SimpleNamespace(get=store.get, table=table)
    return SimpleNamespace(ledger=ledger)


def test_of_thread_decodes_the_records_of_the_thread_alone() -> None:
    mine = _record("<m1@x>", ReplyState.AWAITING, "draft")
    other = _record("<m2@x>", ReplyState.AWAITING, "draft", thread="agentmail:thr-b")

    found = of_thread([mine.encode(), other.encode()], THREAD)

    assert found == [mine]


def test_a_mark_reaching_the_new_message_needs_the_thread() -> None:
    m2 = _inbound("<m2@x>")
    mark = _record("<m1@x>", ReplyState.COVERED, "old draft", covered_by=m2.key)

    assert needing_thread({mark.key: mark}.get, [mark], {m2.key}) == [mark]


def test_a_mark_the_newer_reply_saw_does_not_need_the_thread() -> None:
    mark = _record("<m1@x>", ReplyState.COVERED, "old draft", covered_by=M2)
    theirs = _record("<m2@x>", ReplyState.AWAITING, "new draft", covers=(mark.key,))
    get = {r.key: r for r in (mark, theirs)}.get

    assert needing_thread(get, [mark], set()) == []


def test_a_mark_the_newer_reply_never_saw_needs_the_thread() -> None:
    mark = _record("<m1@x>", ReplyState.COVERED, "old draft", covered_by=M2)
    theirs = _record("<m2@x>", ReplyState.SENT, "their reply", covers=())
    get = {r.key: r for r in (mark, theirs)}.get

    assert needing_thread(get, [mark], set()) == [mark]


def test_a_new_message_in_a_thread_with_no_draft_is_answered_alone() -> None:
    m2 = _inbound("<m2@x>")
    sent = _record("<m1@x>", ReplyState.SENT, "an answer")

    assert unread(_parts(sent), [m2], [m2], m2) is None


def test_a_new_message_in_a_thread_with_a_waiting_draft_fails_naming_it() -> None:
    m3 = _inbound("<m3@x>")
    draft = _record("<m2@x>", ReplyState.AWAITING, "draft", message_at=T0 - timedelta(minutes=1))

    with pytest.raises(ThreadUnread, match=draft.key) as raised:
        unread(_parts(draft), [m3], [m3], m3)

    assert f"the thread of {m3.key} could not be read" in str(raised.value)


def test_a_waiting_draft_of_a_newer_message_does_not_fail_the_burst() -> None:
    # the new reply supersedes only the drafts before its message
    m3 = _inbound("<m3@x>")
    newer = _record("<m4@x>", ReplyState.AWAITING, "draft", message_at=T0 + timedelta(minutes=1))

    assert unread(_parts(newer), [m3], [m3], m3) is None


def test_a_burst_delivered_again_leaves_a_waiting_draft_alone() -> None:
    m3 = _inbound("<m3@x>")
    draft = _record("<m2@x>", ReplyState.AWAITING, "draft")

    assert unread(_parts(draft), [m3], [], m3) is None


def test_a_draft_marked_by_the_new_message_fails_the_burst() -> None:
    # F43's own schedule: the mark written, its writer killed before the new reply
    m2 = _inbound("<m2@x>")
    mark = _record("<m1@x>", ReplyState.COVERED, "old draft", covered_by=m2.key)

    with pytest.raises(ThreadUnread, match=mark.key):
        unread(_parts(mark), [m2], [m2], m2)


def test_a_mark_the_recorded_reply_saw_leaves_the_burst_delivered_again_alone() -> None:
    m2 = _inbound("<m2@x>")
    mark = _record("<m1@x>", ReplyState.COVERED, "old draft", covered_by=m2.key)
    theirs = _record("<m2@x>", ReplyState.AWAITING, "new draft", covers=(mark.key,))

    assert unread(_parts(mark, theirs), [m2], [], m2) is None


def test_a_message_of_the_burst_whose_draft_waits_fails_it_beside_a_new_one() -> None:
    # F46: m2, its draft waiting, delivered again with the new m3 (a catch-up's burst): m3's
    # reply supersedes m2's draft and must recall it, which only the thread holds
    m2, m3 = _inbound("<m2@x>"), _inbound("<m3@x>")
    draft = _record("<m2@x>", ReplyState.AWAITING, "draft", message_at=T0 - timedelta(minutes=1))

    with pytest.raises(ThreadUnread, match=draft.key):
        unread(_parts(draft), [m2, m3], [m3], m3)

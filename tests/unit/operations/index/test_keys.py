"""What key each record is indexed under, the drafts' list and the lag: pure, no Kafka."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from onceonly.foundation.kafka import TopicRange
from onceonly.operations.index import drafts
from onceonly.operations.index.lag import Behind, behind, lost, next_range
from onceonly.operations.index.layout import (
    DRAFTS_PREFIX,
    Kind,
    Topic,
    name_key,
    names_prefix,
    pack,
    position_of,
    record_key,
    records_prefix,
    reply_of_draft,
    unpack,
)
from onceonly.operations.index.names import of_decision, of_delivery, of_ledger
from onceonly.operations.trace import Record
from onceonly.schemas.envelope import TICK_HEADER
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.operations.test_trace import KEY, MESSAGE, _delivery, _envelope

T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _reply(state: ReplyState, key: str = KEY, at: datetime = T) -> ReplyRecord:
    return ReplyRecord(key, "inbox", MESSAGE, "agentmail:thr-1", state, at, reply_text="hi")


def test_a_record_packs_and_unpacks_to_itself_none_and_empty_kept_apart() -> None:
    for record in [
        Record(3, 12_345_678_901, 1_700_000_000_000, b"k", b"v" * 300, (("h", b"1"), ("e", b""))),
        Record(0, 0, 0, None, None),
        Record(1, 2, 3, b"", b""),
    ]:
        assert unpack(pack(record)) == record


def test_positions_sort_in_offset_order_and_a_prefix_holds_only_its_id() -> None:
    keys = [name_key(Kind.MESSAGE, "m1", Topic.DELIVERIES, 1, o) for o in (9, 10, 100)]
    assert sorted(keys) == keys
    assert [position_of(k) for k in keys] == [(1, 9), (1, 10), (1, 100)]
    longer = name_key(Kind.MESSAGE, "m10", Topic.DELIVERIES, 0, 1)
    assert not longer.startswith(names_prefix(Kind.MESSAGE, "m1", Topic.DELIVERIES))
    assert record_key(Topic.LEDGER, 2, 5).startswith(records_prefix(Topic.LEDGER))
    assert not record_key(Topic.LEDGER, 2, 5).startswith(records_prefix(Topic.DELIVERIES))


def test_a_delivery_is_named_by_its_event_dedupe_key_message_and_thread() -> None:
    envelope = _envelope()
    names = of_delivery(_delivery(envelope, 4))
    assert set(names) == {
        (Kind.EVENT, "evt-1"),
        (Kind.EVENT, envelope.dedupe_key),
        (Kind.MESSAGE, MESSAGE),
        (Kind.THREAD, envelope.thread_key),
    }


def test_ticks_and_unreadable_deliveries_are_named_by_nothing() -> None:
    tick = Record(0, 1, 0, b"t", b"{}", ((TICK_HEADER, b"1"),))
    assert of_delivery(tick) == [] and of_delivery(Record(0, 2, 0, b"t", b"not json")) == []


def test_a_ledger_record_is_named_by_reply_key_message_and_thread_an_effect_by_nothing() -> None:
    record = Record(0, 7, 0, KEY.encode(), _reply(ReplyState.SENT).encode())
    assert set(of_ledger(record)) == {
        (Kind.REPLY, KEY),
        (Kind.MESSAGE, MESSAGE),
        (Kind.THREAD, "agentmail:thr-1"),
    }
    assert of_ledger(Record(0, 8, 0, b"effect-1", b"{}")) == []
    assert of_ledger(Record(0, 9, 0, KEY.encode(), None)) == [(Kind.REPLY, KEY)]  # tombstone


def test_a_skip_is_named_by_its_event_and_message() -> None:
    value = json.dumps({"event_id": "evt-9", "message_id": None}).encode()
    assert of_decision(Record(0, 1, 0, b"t", value)) == [(Kind.EVENT, "evt-9")]


def _listed(record: ReplyRecord | None) -> bytes | None:
    key = KEY if record is None else record.key
    return drafts.listed_as(key, None if record is None else json.loads(record.encode()))


def test_a_draft_joins_the_waiting_list_when_it_awaits_and_leaves_when_it_settles() -> None:
    awaiting = _listed(_reply(ReplyState.AWAITING))
    assert awaiting is not None and awaiting.startswith(DRAFTS_PREFIX)
    assert reply_of_draft(awaiting) == KEY
    joined = drafts.change(_listed(_reply(ReplyState.PENDING)), awaiting)
    assert joined == drafts.DraftChange(add=(awaiting,))
    assert drafts.change(awaiting, awaiting) == drafts.DraftChange()  # rewritten, still waiting
    for settled in (_reply(ReplyState.SENT), _reply(ReplyState.DECLINED), None):
        assert _listed(settled) is None
        assert drafts.change(awaiting, _listed(settled)) == drafts.DraftChange(remove=(awaiting,))
    assert drafts.change(None, _listed(_reply(ReplyState.SENT))) == drafts.DraftChange()


def test_drafts_are_listed_oldest_first_whatever_the_offset_of_their_zone() -> None:
    early = _reply(ReplyState.AWAITING, "reply-b", T.astimezone(timezone(timedelta(hours=5))))
    late = _reply(ReplyState.AWAITING, "reply-a", T + timedelta(microseconds=1))
    keys = [_listed(late), _listed(early)]
    assert [reply_of_draft(k) for k in sorted(k for k in keys if k)] == ["reply-b", "reply-a"]


@pytest.mark.parametrize(
    ("stored", "current", "want", "gone"),
    [
        (None, TopicRange(0, 0, 10), TopicRange(0, 0, 10), 0),  # never read: from the start
        (None, TopicRange(0, 4, 10), TopicRange(0, 4, 10), 0),
        (6, TopicRange(0, 0, 10), TopicRange(0, 6, 10), 0),  # resumes from its offset
        (10, TopicRange(0, 0, 10), TopicRange(0, 10, 10), 0),  # up to date
        (2, TopicRange(0, 5, 10), TopicRange(0, 5, 10), 3),  # retention took 2..4 unread
        (12, TopicRange(0, 0, 10), TopicRange(0, 10, 10), 0),  # a recreated topic: nothing
    ],
)
def test_a_partition_is_read_from_its_stored_offset_within_what_the_topic_holds(
    stored: int | None, current: TopicRange, want: TopicRange, gone: int
) -> None:
    assert next_range(stored, current) == want
    assert lost(stored, current) == gone


def test_the_index_is_behind_by_the_records_it_has_not_read_and_says_so() -> None:
    current = [TopicRange(0, 0, 10), TopicRange(1, 0, 5), TopicRange(2, 0, 0)]
    assert behind({0: 10, 1: 5}, current) == 0
    assert behind({0: 7}, current) == 3 + 5
    late = Behind({"onceonly.replies": 8, "onceonly.deliveries": 0})
    assert not late.up_to_date
    assert "index is 8 records behind" in late.line() and "onceonly.replies: 8" in late.line()
    assert Behind({"a": 0}).line() == "index is up to date with the topics"
    assert "unknown" in Behind({}, error="broker down").line()

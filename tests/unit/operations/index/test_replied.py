"""Catch-up's two questions of the reply ledger, answered from a real RocksDB index (and the
records it had not read): the same answers as the whole ledger read once. No Kafka."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from onceonly.foundation.errors import OnceOnlyError
from onceonly.operations.answered import Answered
from onceonly.operations.catchup import Summary, window_for
from onceonly.operations.index.layout import Topic
from onceonly.operations.index.replied import Replied, Unread
from onceonly.operations.index.store import LAYOUT_KEY, IndexStore
from onceonly.operations.index.writes import message_entry, plan
from onceonly.operations.trace import Record
from onceonly.schemas.ledger import ReplyRecord, ReplyState

INBOX, OTHER = "support@agentmail.to", "support@agentmail.to.other"
T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
EAST = timezone(timedelta(hours=2))


def _reply(
    key: str,
    state: ReplyState | None,
    message_at: datetime | None,
    *,
    inbox: str = INBOX,
    created_at: datetime = T,
) -> ReplyRecord | None:
    if state is None:
        return None
    return ReplyRecord(
        key, inbox, f"<{key}@x>", "agentmail:t", state, created_at, message_at=message_at
    )


def _records(writes: list[tuple[str, ReplyRecord | None]], first: int = 0) -> list[Record]:
    return [
        Record(0, first + n, 0, key.encode(), None if r is None else r.encode())
        for n, (key, r) in enumerate(writes)
    ]


#: a ledger in topic order: settled, unsettled, settled then tombstoned, an effect, two
#: inboxes, times in two zones (10:30 at +02:00 is 08:30 UTC: before 09:00 UTC), a record
#: from before message times were kept (its written time counts)
LEDGER: list[tuple[str, ReplyRecord | None]] = [
    ("reply-a", _reply("reply-a", ReplyState.PENDING, T)),
    ("reply-a", _reply("reply-a", ReplyState.SENT, T)),
    ("reply-b", _reply("reply-b", ReplyState.AWAITING, T + timedelta(hours=2))),
    ("reply-c", _reply("reply-c", ReplyState.DECLINED, datetime(2026, 12, 1, 10, 30, tzinfo=EAST))),
    ("reply-d", _reply("reply-d", ReplyState.COVERED, T + timedelta(days=1))),
    ("reply-d", None),
    ("reply-e", _reply("reply-e", ReplyState.SENT, None, created_at=T - timedelta(days=3))),
    ("reply-f", _reply("reply-f", ReplyState.SENT, T + timedelta(days=2), inbox=OTHER)),
    ("effect-1", None),
    ("reply-g", _reply("reply-g", ReplyState.FAILED, T - timedelta(hours=1))),
]
KEYS = sorted({k for k, _ in LEDGER} | {"reply-never"})
BEFORE = [
    None,
    T - timedelta(days=4),
    T - timedelta(days=3),  # exactly reply-e's time: at or before counts it
    T - timedelta(minutes=1),
    T,
    T + timedelta(hours=2),
    T + timedelta(days=1, seconds=-1),
    T + timedelta(days=5),
]


def _whole(writes: list[tuple[str, ReplyRecord | None]]) -> Answered:
    whole = Answered()
    for key, record in writes:
        if key.startswith("reply-"):
            whole.add(key, record)
    return whole


def _indexed(path: Path, writes: list[tuple[str, ReplyRecord | None]]) -> IndexStore:
    store = IndexStore.writer(path)
    records = _records(writes)
    store.write(plan(Topic.LEDGER, records, store.get), "l", 0, len(records))
    return store


def _answers(ledger: Any) -> tuple[dict[str, bool], dict[tuple[str, Any], Any]]:
    settled = {key: key in ledger.settled for key in KEYS}
    times = {(i, b): ledger.last_message_at(i, b) for i in (INBOX, OTHER, "x") for b in BEFORE}
    return settled, times


def test_the_index_answers_catch_ups_questions_as_the_whole_ledger_read_does(
    tmp_path: Path,
) -> None:
    store = _indexed(tmp_path / "index", LEDGER)

    from_index = _answers(Replied(store, Unread()))

    assert from_index == _answers(_whole(LEDGER))
    settled, times = from_index
    assert [k for k, v in settled.items() if v] == ["reply-a", "reply-c", "reply-e", "reply-f"]
    assert times[(INBOX, None)] == T + timedelta(days=1)  # the tombstoned reply's time stays
    assert times[(INBOX, T - timedelta(days=3))] == T - timedelta(days=3)
    assert times[(INBOX, T - timedelta(minutes=1))] == datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    assert times[(INBOX, T - timedelta(days=4))] is None
    assert times[(OTHER, None)] == T + timedelta(days=2)  # an inbox is not its id's prefix
    store.close()


def test_the_records_the_index_has_not_read_win_over_it(tmp_path: Path) -> None:
    later: list[tuple[str, ReplyRecord | None]] = [
        ("reply-a", None),  # sent, then tombstoned: no longer settled
        ("reply-b", _reply("reply-b", ReplyState.SENT, T + timedelta(hours=2))),  # now sent
        ("reply-h", _reply("reply-h", ReplyState.SENT, T + timedelta(days=3))),  # new
        ("reply-i", _reply("reply-i", ReplyState.PENDING, T - timedelta(days=5))),
    ]
    store = _indexed(tmp_path / "index", LEDGER)
    unread = Unread.of(_records(later, first=len(LEDGER)))

    replied = Replied(store, unread)

    assert _answers(replied) == _answers(_whole(LEDGER + later))
    assert "reply-a" not in replied.settled and "reply-b" in replied.settled
    assert replied.last_message_at(INBOX) == T + timedelta(days=3)
    assert replied.last_message_at(INBOX, T - timedelta(days=4)) == T - timedelta(days=5)
    store.close()


def test_catch_up_skips_and_starts_from_the_index_as_from_the_whole_ledger(
    tmp_path: Path,
) -> None:
    store = _indexed(tmp_path / "index", LEDGER)
    replied, whole = Replied(store, Unread()), _whole(LEDGER)
    now = T + timedelta(days=8)

    assert window_for(replied, INBOX, now) == window_for(whole, INBOX, now)
    assert window_for(replied, INBOX, now) is not None
    assert window_for(replied, "never@x", now) is None  # nothing says where to start
    fed: list[str] = []
    summary = Summary()
    for key in ("reply-a", "reply-b", "reply-d", "reply-never"):
        envelope: Any = SimpleNamespace(occurred_at=T, message_id=key, event_id=key)
        _run(summary.feed(key, envelope, answered=replied, feed=lambda e: fed.append(e.event_id)))
    assert fed == ["reply-b", "reply-d", "reply-never"] and summary.skipped_answered == 1
    store.close()


def _run(coroutine: Any) -> None:
    asyncio.run(coroutine)


def test_a_ledger_value_is_recorded_under_its_inbox_at_its_messages_own_time() -> None:
    record = _reply("reply-a", ReplyState.SENT, datetime(2026, 12, 1, 8, 0, tzinfo=EAST))
    assert record is not None
    data = json.loads(record.encode())
    older = {**data, "message_at": None}  # written before the ledger kept message times

    assert message_entry("reply-a", data) == (
        f"inbox\0{INBOX}\x002026-12-01T06:00:00.000000+00:00\0reply-a".encode()
    )
    assert message_entry("reply-a", older) == (
        f"inbox\0{INBOX}\x002026-12-01T09:00:00.000000+00:00\0reply-a".encode()
    )
    assert message_entry("reply-a", {**data, "inbox_id": None}) is None
    assert message_entry("reply-a", {**older, "created_at": "not a time"}) is None


def test_an_index_of_the_layout_before_the_inbox_times_is_refused_with_how_to_rebuild(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index"
    store = IndexStore.writer(path)
    store._db[LAYOUT_KEY] = b"2"  # built before the inbox entries: catch-up would find none
    store.close()

    with pytest.raises(OnceOnlyError, match=r"delete .* and run `onceonly index --follow`"):
        IndexStore.reader(path)
    with pytest.raises(OnceOnlyError, match="built by another version of onceonly"):
        IndexStore.writer(path)

"""Where catch-up starts when it is not told: from the mail's own times."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from onceonly.operations.catchup import Answered, last_answered
from onceonly.schemas.ledger import ReplyRecord, ReplyState

INBOX = "support@agentmail.to"


def _record(key: str, *, written: str, message: str | None) -> ReplyRecord:
    return ReplyRecord(
        key,
        INBOX,
        f"<{key}@x>",
        "agentmail:t",
        ReplyState.SENT,
        datetime.fromisoformat(written).replace(tzinfo=UTC),
        message_at=datetime.fromisoformat(message).replace(tzinfo=UTC) if message else None,
    )


def test_a_reply_written_late_does_not_move_the_start_past_its_messages_time() -> None:
    ledger = {
        "a": _record("a", written="2026-12-01T10:30:00", message="2026-12-01T10:00:00"),
        "b": _record("b", written="2026-12-01T10:10:00", message="2026-12-01T10:05:00"),
    }

    assert last_answered(Answered.of(ledger.values()), INBOX) == datetime(
        2026, 12, 1, 10, 5, tzinfo=UTC
    )


def test_a_record_without_a_message_time_counts_when_it_was_written() -> None:
    ledger = {"old": _record("old", written="2026-11-30T08:00:00", message=None)}

    assert last_answered(Answered.of(ledger.values()), INBOX) == datetime(
        2026, 11, 30, 8, 0, tzinfo=UTC
    )


async def test_a_declined_reply_is_settled_not_fed_nor_waited_for() -> None:
    """A draft a person rejected (or a writer's decline) sends nothing, ever: catch-up counts
    it answered, does not feed it, and does not wait its --wait-s for an email that will
    not come."""
    from dataclasses import replace

    from onceonly.operations.catchup import Summary

    declined = replace(
        _record("d", written="2026-12-01T10:00:00", message=None), state=ReplyState.DECLINED
    )
    awaiting = replace(declined, key="w", state=ReplyState.AWAITING)
    answered = Answered.of([declined, awaiting])
    summary = Summary()
    fed: list[Any] = []
    for key in ("d", "w"):
        envelope = SimpleNamespace(message_id=f"<{key}@x>", event_id=f"e-{key}")
        await summary.feed(key, envelope, answered=answered, feed=fed.append)  # type: ignore[arg-type]

    assert summary.skipped_answered == 1 and summary.fed == ["w"]
    assert [e.message_id for e in fed] == ["<w@x>"]
    assert summary.answered(answered.settled) == 0
    assert summary.answered(Answered.of([declined, replace(declined, key="w")]).settled) == 1


def test_the_latest_record_of_a_key_decides_and_a_tombstone_unsettles_it() -> None:
    from dataclasses import replace

    sent = _record("k", written="2026-12-01T10:00:00", message=None)
    answered = Answered.of([replace(sent, state=ReplyState.AWAITING), sent])
    assert answered.settled == {"k"}
    answered.add("k", None)
    assert answered.settled == set()

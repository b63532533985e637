"""Where catch-up starts when it is not told: from the mail's own times."""

from __future__ import annotations

from datetime import UTC, datetime

from onceonly.operations.catchup import last_answered
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

    assert last_answered(ledger, INBOX) == datetime(2026, 12, 1, 10, 5, tzinfo=UTC)


def test_a_record_without_a_message_time_counts_when_it_was_written() -> None:
    ledger = {"old": _record("old", written="2026-11-30T08:00:00", message=None)}

    assert last_answered(ledger, INBOX) == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


async def test_a_declined_reply_is_settled_not_fed_nor_waited_for() -> None:
    """A draft a person rejected (or a writer's decline) sends nothing, ever: catch-up counts
    it answered, and does not wait its --wait-s for an email that will not come."""
    from dataclasses import replace

    from onceonly.operations.catchup import Summary

    declined = replace(
        _record("d", written="2026-12-01T10:00:00", message=None), state=ReplyState.DECLINED
    )
    awaiting = replace(declined, key="w", state=ReplyState.AWAITING)
    ledger = {"d": declined, "w": awaiting}
    summary = Summary()
    fed: list[object] = []
    for key in ("d", "w"):
        await summary.feed(key, object(), ledger=ledger, feed=fed.append)  # type: ignore[arg-type]

    assert summary.skipped_answered == 1 and summary.fed == ["w"] and len(fed) == 2
    assert summary.answered(ledger) == 0
    assert summary.answered({**ledger, "w": declined}) == 1

"""A reply's dead-letter step (``for_reply``): which envelopes its letter carries."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from onceonly.processors.dead_letters import for_reply
from onceonly.schemas.envelope import Envelope

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def _envelope(event_id: str, message_id: str) -> Envelope:
    return Envelope(
        provider="agentmail",
        event_id=event_id,
        event_type="message.received",
        thread_key="agentmail:t",
        account_id="inbox",
        message_id=message_id,
        occurred_at=T0,
        received_at=T0,
        truncated=True,
        raw="{}",
    )


class Letters:
    def __init__(self) -> None:
        self.carried: list[Envelope] = []

    async def record_reply(self, record: Any, reason: str, envelopes: Sequence[Envelope]) -> None:
        self.carried = list(envelopes)


async def test_a_letter_carries_the_recalled_messages_of_a_superseded_draft_made_again() -> None:
    # a reply that superseded a draft failed: the draft's message was recalled from the
    # thread (no claimed envelope); its envelope is made again (simulator seed 118)
    letters = Letters()
    claimed = _envelope("e2", "<b@x>")
    made = _envelope("resend-a", "<a@x>")
    asked: list[list[str]] = []

    def again(unclaimed: Sequence[Any]) -> list[Envelope]:
        asked.append([m.event_id for m in unclaimed])
        return [made]

    messages = [SimpleNamespace(event_id="recalled:<a@x>"), SimpleNamespace(event_id="e2")]
    await for_reply(letters, lambda: [claimed], again)(object(), "writer_failed", messages)

    assert letters.carried == [claimed, made]
    assert asked == [["recalled:<a@x>"]]


async def test_without_again_a_letter_carries_the_claimed_envelopes_only() -> None:
    letters = Letters()
    claimed = _envelope("e2", "<b@x>")
    messages = [SimpleNamespace(event_id="recalled:<a@x>"), SimpleNamespace(event_id="e2")]

    await for_reply(letters, lambda: [claimed])(object(), "writer_failed", messages)

    assert letters.carried == [claimed]

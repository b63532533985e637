"""The envelope the schema tests encode, sign and dead-letter: every field set, a time
with milliseconds, and a raw body with a character JSON escapes."""

from __future__ import annotations

from datetime import UTC, datetime

from onceonly.schemas.envelope import Envelope

ENVELOPE = Envelope(
    provider="agentmail",
    event_id="evt_1",
    event_type="message.received",
    thread_key="agentmail:thr_1",
    account_id="inbox@agentmail.to",
    message_id="<m@x>",
    occurred_at=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    received_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
    truncated=False,
    raw='{"é": "\\u00e9"}',
)

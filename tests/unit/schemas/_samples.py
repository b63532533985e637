"""The envelope the schema tests encode, sign and dead-letter (every field set, a time
with milliseconds, and a raw body with a character JSON escapes), and a record's encoding
with a field changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

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


def changed(record: Any, **fields: Any) -> str:
    """``record``'s JSON encoding with ``fields`` set to other values."""
    return json.dumps(json.loads(record.encode()) | fields)

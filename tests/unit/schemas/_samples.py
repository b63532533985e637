"""The records the schema tests encode: the envelope they also sign and dead-letter (every
field set, a time with milliseconds, and a raw body with a character JSON escapes), an
approval decision and a ledger record with every field set; and a record's encoding with a
field changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from onceonly.schemas.approval import Action, ApprovalDecision
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState

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

#: an approval decision's time
AT = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
DECISION = ApprovalDecision(
    "d-1", "reply-abc", "agentmail:thr_1", Action.APPROVE, "ana", AT, text="Édité", reason=None
)

FULL = ReplyRecord(
    key="reply-abc",
    inbox_id="agent@agentmail.to",
    message_id="<m1@x>",
    thread_key="agentmail:thr_1",
    state=ReplyState.FAILED,
    created_at=datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC),
    reply_text="Merci — on regarde \u00e7a",
    sent_message_id="<s1@x>",
    covered_by="reply-def",
    attempts=4,
    error="mail API answered 503",
    channel="nylas",
    written_at=datetime(2026, 11, 30, 1, 2, 4, 5, tzinfo=UTC),
)


def changed(record: Any, **fields: Any) -> str:
    """``record``'s JSON encoding with ``fields`` set to other values."""
    return json.dumps(json.loads(record.encode()) | fields)

"""The received message the reply tests build their bursts from."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from onceonly.processors.messages import Inbound

INBOX = "support@agentmail.to"


def received(message_id: str, at: datetime, *, thread: str = "thr_1", **changes: Any) -> Inbound:
    """A customer's message ``message_id`` in AgentMail thread ``thread`` at ``at``; any
    other field as ``changes`` say."""
    message = Inbound(
        inbox_id=INBOX,
        message_id=message_id,
        thread_key=f"agentmail:{thread}",
        thread_id=thread,
        event_id=f"evt-{message_id}",
        occurred_at=at,
        sender="Customer <customer@example.com>",
        subject="Meeting",
        text="Can we move it?",
        labels=("received",),
    )
    return replace(message, **changes)

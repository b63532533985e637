"""The numbered message the chaos writer tests hand their writers."""

from __future__ import annotations

from datetime import UTC, datetime

from onceonly.processors.messages import Inbound


def inbound(n: int, inbox: str = "chaos-0@agentmail.to") -> Inbound:
    """Message ``n`` of the one thread of ``inbox``, its text ``message n``."""
    return Inbound(
        inbox_id=inbox,
        message_id=f"<m{n}@x>",
        thread_key=f"agentmail:{inbox}:thr",
        thread_id="thr",
        event_id=f"evt_{n}",
        occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
        sender="a@example.com",
        subject="Meeting",
        text=f"message {n}",
    )

"""The received message the reply tests build their bursts from, and the ledger record
owed to one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from onceonly.processors.messages import Inbound
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from onceonly.testing import inbound

INBOX = "support@agentmail.to"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def received(message_id: str, at: datetime, *, thread: str = "thr_1", **changes: Any) -> Inbound:
    """A customer's message ``message_id`` in AgentMail thread ``thread`` at ``at``; any
    other field as ``changes`` say."""
    message = inbound(
        "Can we move it?",
        message_id=message_id,
        sender="Customer <customer@example.com>",
        subject="Meeting",
        thread_id=thread,
        inbox_id=INBOX,
        occurred_at=at,
    )
    return replace(message, thread_key=f"agentmail:{thread}", **changes)


def owed(message: Inbound, state: ReplyState, **changes: Any) -> ReplyRecord:
    """The ledger record of the reply owed to ``message``, created at :data:`T0`."""
    return ReplyRecord(
        message.key,
        INBOX,
        message.message_id,
        message.thread_key,
        state,
        T0,
        message_at=message.occurred_at,
        **changes,
    )

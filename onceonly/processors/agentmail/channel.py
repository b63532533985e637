"""The AgentMail channel: an event's message to answer (fetched when left out), and its thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onceonly.processors.agentmail.messages import (
    agentmail_history,
    inbound_from_agentmail,
    skip_reason,
)
from onceonly.processors.messages import Inbound, ThreadMessage
from onceonly.processors.reply import Skip
from onceonly.schemas.envelope import Envelope


@dataclass
class AgentMailChannel:
    sender: Any  #: AgentMailSender or DryRunOutbox: reply, find_reply, fetch
    name: str = "agentmail"

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        message = envelope.payload().get("message") or {}
        if envelope.truncated and envelope.event_type == "message.received":
            message = await self.sender.fetch(envelope.account_id or "", envelope.message_id or "")
        inbound = inbound_from_agentmail(
            message,
            thread_key=envelope.thread_key,
            event_id=envelope.event_id,
            fallback_time=envelope.occurred_at,
        )
        return skip_reason(envelope.event_type, inbound) or inbound

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        messages = await self.sender.thread(message.inbox_id, message.thread_id)
        return agentmail_history(messages, message)

"""Mail channels: how a provider's event becomes a message to answer, and who sends.

The worker asks the channel of an envelope's provider for an :class:`Inbound` (or the
reason to skip it), then runs the same reply-once path with the channel's sender and
key lifetime. AgentMail is here; Nylas plugs in the same way (``processors.nylas``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from processors.reply import (
    AGENTMAIL_KEY_LIFETIME,
    Inbound,
    MailSender,
    Skip,
    inbound_from_agentmail,
    skip_reason,
)
from schemas.envelope import Envelope


class Channel(Protocol):
    name: str
    sender: MailSender
    key_lifetime: timedelta

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        """The message to answer (fetched in full if the event left its body out), or why not.

        Raises :class:`~processors.exceptions.SendError` if a fetch fails.
        """


@dataclass
class AgentMailChannel:
    sender: Any  #: AgentMailSender or DryRunOutbox: reply, find_reply, fetch
    name: str = "agentmail"
    key_lifetime: timedelta = AGENTMAIL_KEY_LIFETIME

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

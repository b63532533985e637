"""Mail channels: how a provider's event becomes a message to answer, and who sends.

The worker asks the channel of an envelope's provider for an :class:`Inbound` (or the
reason to skip it), then runs the same reply-once path with the channel's sender and
key lifetime. AgentMail is here; Nylas plugs in the same way (``processors.nylas``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parseaddr
from typing import Any, Protocol

from processors.messages import ThreadMessage
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

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        """The thread's messages before ``message``, the agent's own replies included."""


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def agentmail_history(
    messages: Sequence[Mapping[str, Any]], message: Inbound
) -> list[ThreadMessage]:
    """A thread's AgentMail messages before ``message`` (itself and later ones left out)."""
    out: list[ThreadMessage] = []
    for m in messages:
        if m.get("message_id") == message.message_id:
            break
        sender = str(m.get("from") or m.get("from_") or "")
        labels = m.get("labels") or ()
        own = "sent" in labels or parseaddr(sender)[1].lower() == message.inbox_id.lower()
        text = m.get("text") or m.get("extracted_text")
        out.append(
            ThreadMessage(
                message_id=str(m.get("message_id", "")),
                sender=sender,
                text=str(text) if text is not None else None,
                timestamp=_when(m.get("timestamp")),
                own=own,
                subject=m.get("subject"),
            )
        )
    return out


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

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        messages = await self.sender.thread(message.inbox_id, message.thread_id)
        return agentmail_history(messages, message)

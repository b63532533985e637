"""The AgentMail channel: an event's message to answer (fetched when left out), its thread,
what catch-up feeds of a listing, and the factories the registry holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from onceonly.foundation.settings import Settings
from onceonly.processors.mail.agentmail.dry_run import AgentMailDryRun
from onceonly.processors.mail.agentmail.listing import is_answerable
from onceonly.processors.mail.agentmail.messages import (
    agentmail_history,
    agentmail_thread,
    inbound_from_agentmail,
    skip_reason,
    timestamp_of,
)
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.mail.outbox import DryRunOutbox
from onceonly.processors.mail.protocol import (
    MailClient,
    Missed,
    catch_up_event_id,
    resend_event_id,
    resent_envelope,
)
from onceonly.processors.messages import Inbound, Skip, ThreadMessage
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord


@dataclass
class AgentMailChannel:
    sender: MailClient  #: AgentMailSender, or AgentMailDryRun without an API key
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

    async def thread_of(self, record: ReplyRecord) -> Sequence[ThreadMessage]:
        thread = record.thread_key.removeprefix(f"{self.name}:")
        return agentmail_thread(await self.sender.thread(record.inbox_id, thread), record.inbox_id)

    async def missed(self, account: str, message: Mapping[str, Any]) -> Missed | None:
        """A received message not the agent's own, as its ``message.received`` webhook."""
        if not is_answerable(message, account):
            return None
        message_id = str(message["message_id"])
        when = timestamp_of(message.get("timestamp"))
        webhook = {
            "type": "event",
            "event_type": "message.received",
            "event_id": catch_up_event_id(account, message_id),
            "message": dict(message),
        }
        return Missed(message_id, when.timestamp() if when else 0.0, webhook)

    def envelope_again(self, record: ReplyRecord, received_at: datetime) -> Envelope:
        """``record``'s message as the ``message.received`` event ingest would make of a
        webhook without its body (:meth:`inbound` fetches it), with a resend event id."""
        event_id = resend_event_id(record.inbox_id, record.message_id)
        at = record.message_at or received_at
        thread = record.thread_key.removeprefix(f"{self.name}:")
        message = {
            "inbox_id": record.inbox_id,
            "thread_id": thread,
            "message_id": record.message_id,
            "timestamp": at.isoformat(),
        }
        webhook = {
            "type": "event",
            "event_type": "message.received",
            "event_id": event_id,
            "message": message,
        }
        return resent_envelope(self.name, record, "message.received", at, received_at, webhook)


# -- what the registry holds (onceonly.processors.mail.registry) ------------------------


def configured(settings: Settings) -> bool:
    """AgentMail is always answered: without AGENTMAIL_API_KEY, as a dry run."""
    return True


def client(settings: Settings, registry: CollectorRegistry | None = None) -> MailClient | None:
    """The API client, if AGENTMAIL_API_KEY is set."""
    key = settings.agentmail_api_key
    if key is None:
        return None
    return AgentMailSender(
        key.get_secret_value(),
        base_url=settings.agentmail_base_url,
        timeout_s=settings.send_timeout_s,
    )


def dry_run(settings: Settings, outbox: DryRunOutbox) -> MailClient:
    return AgentMailDryRun(outbox)


def channel(settings: Settings, sender: MailClient) -> AgentMailChannel:
    return AgentMailChannel(sender)

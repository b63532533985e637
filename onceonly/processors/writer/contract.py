"""What a conversation holds: a message to answer, the thread's history, a writer's decline
or draft."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def reply_key(inbox_id: str, message_id: str) -> str:
    """``reply-`` + sha256(inbox_id, newline, message_id): only ``A-Z a-z 0-9 - . _ ~``."""
    return "reply-" + hashlib.sha256(f"{inbox_id}\n{message_id}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Inbound:
    """One received message, as the reply writer and the sender see it."""

    inbox_id: str
    """The inbox that received it: the AgentMail inbox id, or the Nylas grant id."""
    message_id: str
    """The message's id at the mail API (AgentMail's ``message_id``, Nylas' object id)."""
    thread_key: str
    """Its thread's key: what its deliveries are keyed by in Kafka (``agentmail:<thread id>``)."""
    thread_id: str
    """The thread's id at the mail API."""
    event_id: str
    """The id of the webhook event that delivered it."""
    occurred_at: datetime
    """The message's own time, from the payload."""
    sender: str
    """Who sent it: the ``from`` field as the mail API gives it (``Ann <ann@example.com>``)."""
    subject: str | None
    """Its subject, if it has one."""
    text: str | None
    """Its body as the mail API gives it (AgentMail's ``text``, else ``extracted_text``;
    Nylas' ``body``, else its snippet), or ``None`` when it has none."""
    labels: tuple[str, ...] = ()
    """The mail API's labels or folders (``received``, ``sent``, ...)."""

    @property
    def key(self) -> str:
        """The reply's key: its idempotency key at the mail API and its ledger key."""
        return reply_key(self.inbox_id, self.message_id)


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """One message of the conversation so far, as the mail API has it."""

    message_id: str
    """The message's id at the mail API."""
    sender: str
    """Who sent it."""
    text: str | None
    """Its text, or ``None`` when it has none."""
    timestamp: datetime | None
    """When it was sent or received, as the mail API says (``None`` if it does not)."""
    own: bool = False
    """True for the agent's own messages (its earlier replies)."""
    subject: str | None = None
    """Its subject, if it has one."""


@dataclass(frozen=True, slots=True)
class Decline:
    """What a writer returns to answer nothing: recorded as *declined*, with the reason."""

    reason: str = "declined by the writer"
    """Why, recorded in the ledger and shown by ``onceonly trace``."""
    usage: Any = None
    """What the writer's calls cost ([`Usage`][onceonly.Usage]), set by the worker."""


@dataclass(frozen=True, slots=True)
class Draft:
    """What a writer returns for a reply a person should approve before the customer reads
    it (a refund mentioned, low confidence): recorded as *awaiting approval*, with the
    reason, and sent only once approved (``ONCEONLY_APPROVAL=writer``)."""

    text: str
    """The reply as the writer drafted it; a person may approve it, edit it or reject it."""
    reason: str = "the writer asked for approval"
    """Why a person should see it first, shown beside the draft."""

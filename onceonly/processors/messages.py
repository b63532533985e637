"""The messages the mail providers and the rest of the worker share: a message to answer
(:class:`Inbound`, with its reply's key, :func:`reply_key`), one of its thread
(:class:`ThreadMessage`), why an event has none to answer (:class:`Skip`), and a reply
found already sent in a thread (:class:`FoundReply`).

A provider (:mod:`onceonly.processors.mail`) turns its own shapes into these; the reply
path, the writer and approval read them. This module imports nothing of ours, so both
sides import it and neither imports the other (``tests/unit/test_layers.py``).
``Inbound`` and ``ThreadMessage`` are public (``onceonly.Inbound``,
``onceonly.ThreadMessage``), by way of the writer's contract
(:mod:`onceonly.processors.writer.contract`).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = ["FoundReply", "Inbound", "Skip", "ThreadMessage", "reply_key"]


def reply_key(inbox_id: str, message_id: str) -> str:
    """``reply-`` + sha256(inbox_id, newline, message_id): only ``A-Z a-z 0-9 - . _ ~``."""
    return _reply_key(inbox_id, message_id)


@functools.lru_cache(maxsize=4096)
def _reply_key(inbox_id: str, message_id: str) -> str:
    # asked for again at each step of a message's way (Inbound.key is a property); the
    # messages in flight are far fewer than 4,096
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


class Skip(StrEnum):
    """Why a provider's event is no message to answer."""

    NOT_RECEIVED = "not_received"  #: an event type that is not an inbound message
    NOT_REAL_MAIL = "not_real_mail"  #: spam, blocked, unauthenticated
    OWN_MESSAGE = "own_message"  #: the agent's own outbound mail


class FoundReply(str):
    """The id of a reply found in the thread, with the text the thread holds for it
    (``text``; None where the provider's copy is not plain text to compare)."""

    text: str | None

    def __new__(cls, message_id: str, text: str | None = None) -> FoundReply:
        found = super().__new__(cls, message_id)
        found.text = text
        return found

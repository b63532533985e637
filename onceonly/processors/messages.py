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
    message_id: str
    thread_key: str
    thread_id: str
    event_id: str
    occurred_at: datetime
    sender: str
    subject: str | None
    text: str | None
    labels: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return reply_key(self.inbox_id, self.message_id)


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """One message of the conversation so far, as the mail API has it."""

    message_id: str
    sender: str
    text: str | None
    timestamp: datetime | None
    #: True for the agent's own messages (its earlier replies)
    own: bool = False
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class Decline:
    """What a writer returns to answer nothing: recorded as *declined*, with the reason."""

    reason: str = "declined by the writer"
    #: what the writer's calls cost (:class:`onceonly.schemas.ledger.Usage`), set by the worker
    usage: Any = None


@dataclass(frozen=True, slots=True)
class Draft:
    """What a writer returns for a reply a person should approve before the customer reads
    it (a refund mentioned, low confidence): recorded as *awaiting approval*, with the
    reason, and sent only once approved (``ONCEONLY_APPROVAL=writer``)."""

    text: str
    reason: str = "the writer asked for approval"

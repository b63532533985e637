"""AgentMail's messages, as the worker reads them: what to answer, and a sent reply in a thread."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from email.utils import parseaddr
from typing import Any

from onceonly.processors.messages import FoundReply, Inbound, Skip, ThreadMessage

#: AgentMail event types that are mail but not mail to answer.
NOT_REAL_MAIL = frozenset(
    {"message.received.spam", "message.received.blocked", "message.received.unauthenticated"}
)


def skip_reason(event_type: str, message: Inbound) -> Skip | None:
    """Why a message.received event must not be answered, or None to answer it."""
    if event_type in NOT_REAL_MAIL:
        return Skip.NOT_REAL_MAIL
    if event_type != "message.received":
        return Skip.NOT_RECEIVED
    sender = parseaddr(message.sender)[1].lower()
    if "sent" in message.labels or (sender and sender == message.inbox_id.lower()):
        return Skip.OWN_MESSAGE
    return None


def find_sent_reply(
    thread_messages: Iterable[Mapping[str, Any]], message_id: str
) -> FoundReply | None:
    """The message labelled sent that replies to ``message_id``, if the thread has one: its
    id, with its text."""
    for message in thread_messages:
        labels = message.get("labels") or ()
        if "sent" in labels and message.get("in_reply_to") == message_id:
            text = message.get("text")
            return FoundReply(
                str(message.get("message_id")), text if isinstance(text, str) else None
            )
    return None


def inbound_from_agentmail(
    message: Mapping[str, Any], *, thread_key: str, event_id: str, fallback_time: datetime
) -> Inbound:
    """An AgentMail ``message`` object (from an event or from ``messages.get``) as an Inbound."""
    occurred = message.get("timestamp")
    when = fallback_time
    if isinstance(occurred, str):
        try:
            when = datetime.fromisoformat(occurred.replace("Z", "+00:00"))
        except ValueError:
            when = fallback_time
    text = message.get("text") or message.get("extracted_text")
    return Inbound(
        inbox_id=str(message.get("inbox_id", "")),
        message_id=str(message.get("message_id", "")),
        thread_key=thread_key,
        thread_id=str(message.get("thread_id", "")),
        event_id=event_id,
        occurred_at=when,
        sender=str(message.get("from") or message.get("from_") or ""),
        subject=message.get("subject"),
        text=str(text) if text is not None else None,
        labels=tuple(message.get("labels") or ()),
    )


def timestamp_of(value: Any) -> datetime | None:
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
    return agentmail_thread(messages, message.inbox_id, until=message.message_id)


def agentmail_thread(
    messages: Sequence[Mapping[str, Any]], inbox_id: str, until: str | None = None
) -> list[ThreadMessage]:
    """A thread's AgentMail messages in order, up to the one whose id is ``until`` (left
    out, with every later one); all of them when ``until`` is None."""
    out: list[ThreadMessage] = []
    for m in messages:
        if until is not None and m.get("message_id") == until:
            break
        sender = str(m.get("from") or m.get("from_") or "")
        labels = m.get("labels") or ()
        own = "sent" in labels or parseaddr(sender)[1].lower() == inbox_id.lower()
        text = m.get("text") or m.get("extracted_text")
        out.append(
            ThreadMessage(
                message_id=str(m.get("message_id", "")),
                sender=sender,
                text=str(text) if text is not None else None,
                timestamp=timestamp_of(m.get("timestamp")),
                own=own,
                subject=m.get("subject"),
            )
        )
    return out

"""Nylas messages, as the worker reads them: who sent one, whose it is, its reply in a thread."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parseaddr
from typing import Any

from onceonly.processors.messages import Inbound

#: the notification types that carry a new message to answer
ANSWERABLE = frozenset({"message.created", "message.created.truncated"})


IDEMPOTENCY_HEADER = "Idempotency-Key"


REPLAY_HEADER = "Idempotent-Response"


MAX_KEY_LENGTH = 256


#: how many of a thread's messages the reconcile step reads at most (the newest)
RECONCILE_LOOKUPS = 50


def as_mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _first_address(participants: Any) -> tuple[str, str]:
    """(name, email) of the first entry of a Nylas participant list, or ("", "")."""
    if isinstance(participants, list) and participants:
        first = participants[0]
        if isinstance(first, Mapping):
            return str(first.get("name") or ""), str(first.get("email") or "")
        if isinstance(first, str):
            name, email = parseaddr(first)
            return name, email or first
    return "", ""


def sender_of(message: Mapping[str, Any]) -> str:
    """The sender's address (``from[0].email``), or ""."""
    return _first_address(message.get("from") or message.get("from_"))[1]


def reply_subject(subject: str | None) -> str:
    """``Re: <subject>``, without stacking ``Re:`` prefixes."""
    text = (subject or "").strip()
    return text if text.lower().startswith("re:") else f"Re: {text}".rstrip()


def own_message(message: Mapping[str, Any], own_address: str | None) -> bool:
    """True for the grant's own mail: sent from its address, or filed in SENT."""
    folders = {str(f).upper() for f in message.get("folders") or ()}
    sender = sender_of(message).strip().lower()
    return "SENT" in folders or bool(own_address and sender == own_address.strip().lower())


def header(message: Mapping[str, Any], name: str) -> str | None:
    """A header's value from a message fetched with ``fields=include_headers``."""
    for item in message.get("headers") or ():
        if isinstance(item, Mapping) and str(item.get("name", "")).lower() == name.lower():
            return str(item.get("value", "")).strip()
    return None


def find_nylas_reply(
    candidates: Iterable[Mapping[str, Any]], original: Mapping[str, Any], own_address: str | None
) -> str | None:
    """The id of the grant's own message that replies to ``original``, if one is here.

    A reply is the grant's own mail whose ``In-Reply-To`` is the original's
    ``Message-ID`` (both read with ``fields=include_headers``). Without a ``Message-ID``
    on the original, any of the grant's own messages dated at or after it counts.
    """
    wanted = header(original, "Message-ID")
    since = int(original.get("date") or 0)
    for message in candidates:
        if message.get("id") == original.get("id") or not own_message(message, own_address):
            continue
        if wanted:
            if header(message, "In-Reply-To") == wanted:
                return str(message["id"])
        elif int(message.get("date") or 0) >= since:
            return str(message["id"])
    return None


def inbound_from_nylas(
    message: Mapping[str, Any], *, thread_key: str, event_id: str, fallback_time: datetime
) -> Inbound:
    """A Nylas message object (a notification's ``data.object`` or a fetched message)."""
    when = fallback_time
    date = message.get("date")
    if isinstance(date, int | float) and not isinstance(date, bool) and date > 0:
        when = datetime.fromtimestamp(date, tz=UTC)
    text = message.get("body") or message.get("snippet")
    return Inbound(
        inbox_id=str(message.get("grant_id") or ""),
        message_id=str(message.get("id") or ""),
        thread_key=thread_key,
        thread_id=str(message.get("thread_id") or ""),
        event_id=event_id,
        occurred_at=when,
        sender=sender_of(message),
        subject=message.get("subject"),
        text=str(text) if text is not None else None,
        labels=tuple(str(f) for f in message.get("folders") or ()),
    )


def is_replay(headers: Mapping[str, str] | None) -> bool:
    """``Idempotent-Response: true``: Nylas answered from its cache, nothing was sent."""
    if not headers:
        return False
    value = headers.get(REPLAY_HEADER)
    if value is None:  # a plain dict: compare names case-insensitively
        value = next((v for k, v in headers.items() if k.lower() == REPLAY_HEADER.lower()), None)
    return str(value or "").strip().lower() == "true"

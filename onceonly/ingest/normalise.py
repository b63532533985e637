"""From a verified body to an :class:`~onceonly.schemas.envelope.Envelope`, one function per
provider.

Pure functions: the body text, the request headers and the receipt time in, an
envelope out, or :class:`~onceonly.ingest.exceptions.PayloadError` naming what is missing.
Thread keys are prefixed with the provider, so two providers never share a key.

Thread key per provider (the Kafka key, so one consumer owns each conversation):

* AgentMail: ``message.thread_id`` (or the ``thread_id`` of the event's object).
* Nylas: ``data.object.thread_id``; objects without a thread use ``data.object.id``.
* Stripe: ``data.object.invoice`` when the object belongs to an invoice (charges,
  payment intents), so an invoice's events stay in order; else ``data.object.id``.
* GitHub: ``<repository>#<issue or PR number>``; else the repository; else the event id
  (the SHA-256 of the body: ``X-GitHub-Delivery`` is not signed).
* Standard Webhooks: ``data.thread_id``, else ``data.id``, else the event id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from onceonly.ingest.exceptions import PayloadError
from onceonly.schemas.codec import loads
from onceonly.schemas.envelope import Envelope

Normaliser = Callable[[str, Mapping[str, str], datetime], Envelope]

#: AgentMail event types whose ``message`` carries the mail an agent answers.
AGENTMAIL_RECEIVED_PREFIX = "message.received"


def _parse(body: str) -> dict[str, Any]:
    try:
        data = loads(body)
    except (ValueError, RecursionError) as exc:
        raise PayloadError("not_json", f"verified body is not JSON: {exc!s:.200}") from exc
    if not isinstance(data, dict):
        raise PayloadError("bad_shape", "verified body is JSON but not an object")
    return data


def _text(value: Any) -> str | None:
    """A non-empty id-like value as text; anything else is None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int):
        text = str(value)
        return text or None
    return None


def _require_id(value: Any, where: str) -> str:
    event_id = _text(value)
    if event_id is None:
        raise PayloadError("no_event_id", f"verified body has no event id ({where})")
    return event_id


def _epoch(value: Any) -> datetime | None:
    """Seconds or milliseconds since the epoch (Nylas sends both in the wild)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = value / 1000 if value > 100_000_000_000 else value
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _iso(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)  # the envelope keeps UTC: the ends of the calendar
    except OverflowError:  # with a zone (0001-01-01T00:00+14:00) have no UTC time
        raise PayloadError(
            "bad_shape", f"timestamp {value[:40]!r} is outside the calendar in UTC"
        ) from None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def agentmail(body: str, headers: Mapping[str, str], received_at: datetime) -> Envelope:
    """AgentMail (through Svix): ``{"type": "event", "event_type", "event_id", <object>}``."""
    data = _parse(body)
    event_id = _require_id(data.get("event_id"), "event_id")
    event_type = _text(data.get("event_type")) or "unknown"
    # The event's object is ``message`` for message.received*, ``send``/``delivery``/
    # ``bounce``... for the others: the first object carrying an inbox id.
    subject = _obj(data.get("message")) or next(
        (v for v in data.values() if isinstance(v, dict) and "inbox_id" in v), {}
    )
    thread = _text(subject.get("thread_id")) or event_id
    truncated = event_type.startswith(AGENTMAIL_RECEIVED_PREFIX) and not (
        subject.get("text") or subject.get("html") or subject.get("extracted_text")
    )
    return Envelope(
        provider="agentmail",
        event_id=event_id,
        event_type=event_type,
        thread_key=f"agentmail:{thread}",
        account_id=_text(subject.get("inbox_id")),
        message_id=_text(subject.get("message_id")),
        occurred_at=_iso(subject.get("timestamp")) or received_at,
        received_at=received_at,
        truncated=truncated,
        raw=body,
    )


def nylas(body: str, headers: Mapping[str, str], received_at: datetime) -> Envelope:
    """Nylas v3 notification: ``{"id", "type", "time", "data": {"object": {...}}}``."""
    data = _parse(body)
    event_id = _require_id(data.get("id"), "id")
    event_type = _text(data.get("type")) or "unknown"
    obj = _obj(_obj(data.get("data")).get("object"))
    thread = _text(obj.get("thread_id")) or _text(obj.get("id")) or event_id
    return Envelope(
        provider="nylas",
        event_id=event_id,
        event_type=event_type,
        thread_key=f"nylas:{thread}",
        account_id=_text(obj.get("grant_id")),
        message_id=_text(obj.get("id")) if obj.get("object") == "message" else None,
        occurred_at=_epoch(data.get("time")) or received_at,
        received_at=received_at,
        truncated=event_type.endswith(".truncated"),
        raw=body,
    )


def stripe(body: str, headers: Mapping[str, str], received_at: datetime) -> Envelope:
    """Stripe event: ``{"id": "evt_...", "type", "created", "data": {"object": {...}}}``."""
    data = _parse(body)
    event_id = _require_id(data.get("id"), "id")
    obj = _obj(_obj(data.get("data")).get("object"))
    thread = _text(obj.get("invoice")) or _text(obj.get("id")) or event_id
    return Envelope(
        provider="stripe",
        event_id=event_id,
        event_type=_text(data.get("type")) or "unknown",
        thread_key=f"stripe:{thread}",
        account_id=_text(data.get("account")),
        message_id=None,
        occurred_at=_epoch(data.get("created")) or received_at,
        received_at=received_at,
        truncated=False,
        raw=body,
    )


def github(body: str, headers: Mapping[str, str], received_at: datetime) -> Envelope:
    """GitHub: the event id is the SHA-256 of the signed body; the event name is a header.

    ``X-GitHub-Delivery`` is outside the signature: an id taken from it would let anyone
    holding one captured delivery replay it under a fresh id, past dedupe. The body is
    signed, so a replay, with any delivery id, gets the same event id. (ingest logs the
    delivery id, to match GitHub's "Recent Deliveries".)
    """
    data = _parse(body)
    event_id = github_event_id(body)
    event = _text(headers.get("X-GitHub-Event")) or "unknown"
    action = _text(data.get("action"))
    repo = _text(_obj(data.get("repository")).get("full_name"))
    number = _text(_obj(data.get("issue")).get("number")) or _text(
        _obj(data.get("pull_request")).get("number")
    )
    thread = f"{repo}#{number}" if repo and number else repo or event_id
    return Envelope(
        provider="github",
        event_id=event_id,
        event_type=f"{event}.{action}" if action else event,
        thread_key=f"github:{thread}",
        account_id=_text(_obj(data.get("installation")).get("id")),
        message_id=None,
        occurred_at=received_at,  # GitHub payloads have no event timestamp
        received_at=received_at,
        truncated=False,
        raw=body,
    )


def github_event_id(body: str) -> str:
    """``sha256:<hex>`` of the body as received (verified UTF-8, so it encodes back exactly)."""
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def standard(source: str) -> Normaliser:
    """Standard Webhooks: ``webhook-id`` header, body ``{"type", "timestamp", "data"}``."""

    def normalise(body: str, headers: Mapping[str, str], received_at: datetime) -> Envelope:
        data = _parse(body)
        event_id = _require_id(headers.get("webhook-id"), "webhook-id header")
        obj = _obj(data.get("data"))
        thread = _text(obj.get("thread_id")) or _text(obj.get("id")) or event_id
        return Envelope(
            provider=f"standard.{source}",
            event_id=event_id,
            event_type=_text(data.get("type")) or "unknown",
            thread_key=f"standard.{source}:{thread}",
            account_id=None,
            message_id=None,
            occurred_at=_iso(data.get("timestamp")) or received_at,
            received_at=received_at,
            truncated=False,
            raw=body,
        )

    return normalise


#: the normaliser of each route of :data:`onceonly.foundation.providers.ROUTES`, by its name
NORMALISERS: Mapping[str, Normaliser] = {
    "agentmail": agentmail,
    "nylas": nylas,
    "stripe": stripe,
    "github": github,
}


def for_route(name: str) -> Normaliser:
    """The normaliser of the route ``name`` (``standard/<source>`` included)."""
    if name.startswith("standard/"):
        return standard(name.split("/", 1)[1])
    return NORMALISERS[name]

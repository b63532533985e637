"""The Nylas channel: a notification's message to answer, its thread, what catch-up feeds
of a listing, and the factories the registry holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from onceonly.foundation.settings import Settings
from onceonly.processors.mail.nylas.dry_run import NylasDryRun
from onceonly.processors.mail.nylas.messages import (
    ANSWERABLE,
    as_mapping,
    inbound_from_nylas,
    own_message,
    sender_of,
)
from onceonly.processors.mail.nylas.sender import NylasSender, replay_counter
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

#: bodies above this are left out of a catch-up webhook, which is then marked
#: ``message.created.truncated`` so the worker fetches the message, as Nylas does > 1 MB
INLINE_BODY_BYTES = 256 * 1024


@runtime_checkable
class NylasClient(MailClient, Protocol):
    """Nylas's client (:class:`NylasSender` or :class:`NylasDryRun`): a mail client that
    also keeps who a reply to a message goes to, and its subject, from the notification."""

    def remember(self, grant_id: str, message: Mapping[str, Any]) -> object: ...


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e11:
        return datetime.fromtimestamp(value, UTC)
    return None


@dataclass
class NylasChannel:
    sender: NylasClient  #: NylasSender, or NylasDryRun without an API key
    own_address: str | None = None  #: configured; else the sender reads it from the grant
    name: str = "nylas"

    async def _own(self, grant_id: str) -> str | None:
        return self.own_address or await self.sender.address(grant_id)

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        if envelope.event_type not in ANSWERABLE:
            return Skip.NOT_RECEIVED  # message.updated, opened, threads, ...: never answered
        obj = as_mapping(as_mapping(as_mapping(envelope.payload()).get("data")).get("object"))
        grant_id = envelope.account_id or str(obj.get("grant_id") or "")
        message_id = envelope.message_id or ""
        if not grant_id or not message_id:
            return Skip.NOT_RECEIVED
        if envelope.truncated or (not sender_of(obj) and not self.sender.dry_run):
            obj = await self.sender.fetch(grant_id, message_id)  # the body, and who sent it
        if sender_of(obj):
            self.sender.remember(grant_id, obj)
        if own_message(obj, await self._own(grant_id)):
            return Skip.OWN_MESSAGE
        return inbound_from_nylas(
            {**obj, "grant_id": grant_id, "id": message_id},
            thread_key=envelope.thread_key,
            event_id=envelope.event_id,
            fallback_time=envelope.occurred_at,
        )

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        if not message.thread_id:
            return ()
        return await self._thread(message.inbox_id, message.thread_id, message.message_id)

    async def thread_of(self, record: ReplyRecord) -> Sequence[ThreadMessage]:
        thread = record.thread_key.removeprefix(f"{self.name}:")
        return await self._thread(record.inbox_id, thread) if thread else ()

    async def _thread(
        self, grant_id: str, thread_id: str, until: str | None = None
    ) -> list[ThreadMessage]:
        """The thread's messages in order, up to the one whose id is ``until`` (left out,
        with every later one); all of them when ``until`` is None."""
        own = await self._own(grant_id)
        out: list[ThreadMessage] = []
        for m in await self.sender.thread(grant_id, thread_id):
            if until is not None and m.get("id") == until:
                break
            out.append(
                ThreadMessage(
                    message_id=str(m.get("id", "")),
                    sender=sender_of(m),
                    text=m.get("body") or m.get("snippet"),
                    timestamp=_timestamp(m.get("date")),
                    own=own_message(m, own),
                    subject=m.get("subject"),
                )
            )
        return out

    async def missed(self, account: str, message: Mapping[str, Any]) -> Missed | None:
        """A message not the grant's own, as its ``message.created`` notification (bodies
        above :data:`INLINE_BODY_BYTES` left out, as ``message.created.truncated``)."""
        if own_message(message, await self._own(account)):
            return None
        message_id = str(message["id"])
        obj = {**message, "grant_id": account, "object": "message"}
        event_type = "message.created"
        if len(str(obj.get("body") or "").encode()) > INLINE_BODY_BYTES:
            obj.pop("body", None)
            event_type = "message.created.truncated"
        date = message.get("date")
        at = float(date) if isinstance(date, int | float) and not isinstance(date, bool) else 0.0
        webhook = {
            "specversion": "1.0",
            "type": event_type,
            "source": "/onceonly/catch-up",
            "id": catch_up_event_id(account, message_id),
            "time": int(at) if at else None,
            "data": {"object": obj},
        }
        return Missed(message_id, at, webhook)

    def envelope_again(self, record: ReplyRecord, received_at: datetime) -> Envelope:
        """``record``'s message as the ``message.created.truncated`` notification ingest
        would make an envelope of (:meth:`inbound` fetches it), with a resend event id."""
        event_id = resend_event_id(record.inbox_id, record.message_id)
        at = record.message_at or received_at
        obj = {
            "id": record.message_id,
            "grant_id": record.inbox_id,
            "thread_id": record.thread_key.removeprefix(f"{self.name}:"),
            "object": "message",
        }
        event_type = "message.created.truncated"
        webhook = {
            "specversion": "1.0",
            "type": event_type,
            "source": "/onceonly/resend",
            "id": event_id,
            "time": int(at.timestamp()),
            "data": {"object": obj},
        }
        return resent_envelope(self.name, record, event_type, at, received_at, webhook)


# -- what the registry holds (onceonly.processors.mail.registry) ------------------------


def configured(settings: Settings) -> bool:
    """Nylas is answered if configured: an API key, a webhook secret or the grant's address."""
    return bool(
        settings.nylas_api_key is not None
        or settings.nylas_webhook_secret is not None
        or settings.nylas_grant_email
    )


def client(settings: Settings, registry: CollectorRegistry | None = None) -> NylasSender | None:
    """The API client, if NYLAS_API_KEY is set."""
    key = settings.nylas_api_key
    if key is None:
        return None
    return NylasSender(
        key.get_secret_value(),
        api_uri=settings.nylas_api_uri,
        timeout_s=settings.send_timeout_s,
        own_address=settings.nylas_grant_email,
        replays=replay_counter(registry),
    )


def dry_run(settings: Settings, outbox: DryRunOutbox) -> NylasDryRun:
    return NylasDryRun(outbox, own_address=settings.nylas_grant_email)


def channel(settings: Settings, sender: MailClient) -> NylasChannel:
    if not isinstance(sender, NylasClient):
        raise TypeError(f"the Nylas channel needs a Nylas client, not {type(sender).__name__}")
    return NylasChannel(sender, own_address=settings.nylas_grant_email)

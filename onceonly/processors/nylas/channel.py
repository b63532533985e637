"""The Nylas channel: a notification's message to answer, its thread, and the factory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from onceonly.foundation.settings import Settings
from onceonly.processors.messages import Inbound, ThreadMessage
from onceonly.processors.nylas.messages import (
    ANSWERABLE,
    as_mapping,
    inbound_from_nylas,
    own_message,
    sender_of,
)
from onceonly.processors.nylas.sender import NylasSender, replay_counter
from onceonly.processors.reply import Skip
from onceonly.schemas.envelope import Envelope


@dataclass
class NylasChannel:
    sender: Any  #: NylasSender or DryRunOutbox: reply, find_reply, fetch
    own_address: str | None = None  #: configured; else the sender reads it from the grant
    name: str = "nylas"

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        if envelope.event_type not in ANSWERABLE:
            return Skip.NOT_RECEIVED  # message.updated, opened, threads, ...: never answered
        obj = as_mapping(as_mapping(as_mapping(envelope.payload()).get("data")).get("object"))
        grant_id = envelope.account_id or str(obj.get("grant_id") or "")
        message_id = envelope.message_id or ""
        if not grant_id or not message_id:
            return Skip.NOT_RECEIVED
        if envelope.truncated or (not sender_of(obj) and isinstance(self.sender, NylasSender)):
            obj = await self.sender.fetch(grant_id, message_id)  # the body, and who sent it
        remember = getattr(self.sender, "remember", None)
        if remember is not None and sender_of(obj):
            remember(grant_id, obj)
        lookup = getattr(self.sender, "grant_address", None)
        own = self.own_address or (await lookup(grant_id) if lookup else None)
        if own_message(obj, own):
            return Skip.OWN_MESSAGE
        return inbound_from_nylas(
            {**obj, "grant_id": grant_id, "id": message_id},
            thread_key=envelope.thread_key,
            event_id=envelope.event_id,
            fallback_time=envelope.occurred_at,
        )

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        thread = getattr(self.sender, "thread", None)
        if thread is None or not message.thread_id:
            return ()
        lookup = getattr(self.sender, "grant_address", None)
        own = self.own_address or (await lookup(message.inbox_id) if lookup else None)
        out: list[ThreadMessage] = []
        for m in await thread(message.inbox_id, message.thread_id):
            if m.get("id") == message.message_id:
                break
            when = m.get("date")
            out.append(
                ThreadMessage(
                    message_id=str(m.get("id", "")),
                    sender=sender_of(m),
                    text=m.get("body") or m.get("snippet"),
                    timestamp=(
                        datetime.fromtimestamp(when, UTC)
                        if isinstance(when, int | float) and abs(when) < 1e11
                        else None
                    ),
                    own=own_message(m, own),
                    subject=m.get("subject"),
                )
            )
        return out


def nylas_channel(
    settings: Settings, *, outbox: Any = None, registry: CollectorRegistry | None = None
) -> NylasChannel | None:
    """The Nylas channel if Nylas is configured (an API key, a webhook secret or an address).

    Without ``NYLAS_API_KEY`` replies go to the dry-run ``outbox`` (AgentMail's, if given).
    """
    key = settings.nylas_api_key
    own = settings.nylas_grant_email
    if key is None and settings.nylas_webhook_secret is None and not own:
        return None
    if key is None:
        from onceonly.processors.outbox import DryRunOutbox

        sender = outbox or DryRunOutbox(settings.run_dir / "dry-run-outbox.jsonl")
        return NylasChannel(sender, own_address=own)
    return NylasChannel(
        NylasSender(
            key.get_secret_value(),
            api_uri=settings.nylas_api_uri,
            timeout_s=settings.send_timeout_s,
            own_address=own,
            replays=replay_counter(registry),
        ),
        own_address=own,
    )

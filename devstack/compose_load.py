"""The compose test's load: AgentMail ``message.received`` deliveries, one thread each,
signed as Svix signs them (the svix library), POSTed to the compose ingest in order."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
import svix.webhooks

INBOX = "support@agentmail.to"


@dataclass(frozen=True)
class Delivery:
    message_id: str  #: the AgentMail message id: the outbox's ``message_id`` of its reply
    body: bytes
    headers: dict[str, str]


def agentmail_delivery(secret: str, *, thread_id: str, text: str, at: datetime) -> Delivery:
    """One signed AgentMail delivery of a new message in thread ``thread_id``."""
    message_id = f"<{uuid.uuid4().hex}@example.com>"
    stamp = at.isoformat()
    message = {
        "inbox_id": INBOX,
        "thread_id": thread_id,
        "message_id": message_id,
        "labels": ["received"],
        "timestamp": stamp,
        "from": "customer@example.com",
        "to": [INBOX],
        "subject": "Compose test",
        "text": text,
        "created_at": stamp,
        "updated_at": stamp,
    }
    payload = {
        "type": "event",
        "event_type": "message.received",
        "event_id": f"evt_{uuid.uuid4().hex}",
        "message": message,
        "thread": {"inbox_id": INBOX, "thread_id": thread_id},
    }
    body = json.dumps(payload).encode()
    svix_id = f"msg_{uuid.uuid4().hex}"
    headers = {
        "svix-id": svix_id,
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": svix.webhooks.Webhook(secret).sign(svix_id, at, body.decode()),
        "content-type": "application/json",
    }
    return Delivery(message_id, body, headers)


def load(secret: str, count: int) -> list[Delivery]:
    """``count`` messages, each the first of its own thread (one reply owed per message)."""
    run = uuid.uuid4().hex[:8]
    at = datetime.now(UTC)
    return [
        agentmail_delivery(secret, thread_id=f"thr_ct_{run}_{i}", text=f"Question {i}?", at=at)
        for i in range(count)
    ]


async def _post_all(url: str, deliveries: Sequence[Delivery]) -> list[int]:
    statuses: list[int] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for delivery in deliveries:
            try:
                async with http.post(url, data=delivery.body, headers=delivery.headers) as answer:
                    await answer.read()
                    statuses.append(answer.status)
            except (aiohttp.ClientError, TimeoutError):
                statuses.append(0)
    return statuses


def post(base_url: str, deliveries: Sequence[Delivery]) -> list[int]:
    """POST each delivery to ``<base_url>/webhooks/agentmail`` in order; the HTTP statuses
    (0: no answer)."""
    return asyncio.run(_post_all(f"{base_url.rstrip('/')}/webhooks/agentmail", deliveries))

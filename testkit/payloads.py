"""Provider payloads shaped like the real ones (fields the normaliser reads, and a few more)."""

from __future__ import annotations

import json
import uuid
from typing import Any


def dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def agentmail_received(
    *,
    event_id: str | None = None,
    inbox_id: str = "support@agentmail.to",
    thread_id: str = "thr_1",
    message_id: str | None = None,
    timestamp: str = "2026-11-29T10:00:00.000Z",
    sender: str = "customer@example.com",
    text: str | None = "Can you move our meeting to Friday?",
    event_type: str = "message.received",
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "inbox_id": inbox_id,
        "thread_id": thread_id,
        "message_id": message_id or f"<{uuid.uuid4().hex}@example.com>",
        "labels": ["received"],
        "timestamp": timestamp,
        "from": sender,
        "to": [inbox_id],
        "subject": "Meeting",
        "size": 1234,
        "created_at": timestamp,
        "updated_at": timestamp,
    }
    if text is not None:
        message["text"] = text
    return {
        "type": "event",
        "event_type": event_type,
        "event_id": event_id or f"evt_{uuid.uuid4().hex}",
        "message": message,
        "thread": {"inbox_id": inbox_id, "thread_id": thread_id},
    }


def nylas_message(
    *,
    notification_id: str | None = None,
    event_type: str = "message.created",
    grant_id: str = "grant-1",
    message_id: str = "msg-1",
    thread_id: str = "thread-1",
    time_ms: int = 1_737_500_935_555,
) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "type": event_type,
        "source": "/google/emails/realtime",
        "id": notification_id or str(uuid.uuid4()),
        "time": time_ms,
        "data": {
            "application_id": "app-1",
            "object": {
                "id": message_id,
                "grant_id": grant_id,
                "thread_id": thread_id,
                "object": "message",
                "subject": "Can you resend my invoice?",
            },
        },
    }


def stripe_event(*, event_id: str | None = None, invoice: str = "in_1") -> dict[str, Any]:
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": "invoice.paid",
        "created": 1_764_410_000,
        "data": {"object": {"id": invoice, "object": "invoice", "customer": "cus_1"}},
    }


def github_issue(*, repo: str = "acme/widgets", number: int = 7) -> dict[str, Any]:
    return {
        "action": "opened",
        "issue": {"number": number, "title": "It broke"},
        "repository": {"full_name": repo},
        "installation": {"id": 42},
    }


def standard_event(*, thread_id: str = "case-9") -> dict[str, Any]:
    return {
        "type": "case.updated",
        "timestamp": "2026-11-29T10:00:00Z",
        "data": {"id": "obj-1", "thread_id": thread_id},
    }

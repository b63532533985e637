"""The dry-run outbox: what would have been sent, when a channel has no API key."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.mail")


@dataclass
class DryRunOutbox:
    """What would have been sent, kept in memory and appended to a JSON-lines file."""

    path: Path | None = None
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def reply(self, record: ReplyRecord) -> str:
        for entry in self.sent:
            if entry["key"] == record.key:  # idempotent like the real API
                return str(entry["sent_message_id"])
        entry = json.loads(record.encode())  # the ledger's own JSON: every field serialised
        entry["sent_message_id"] = f"<dry-run-{record.key}@onceonly>"
        self.sent.append(entry)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as out:
                out.write(json.dumps(entry) + "\n")
        log.info("dry run: reply not sent (no API key for this channel)", key=record.key)
        return str(entry["sent_message_id"])

    async def find_reply(self, record: ReplyRecord) -> str | None:
        for entry in self.sent:
            if entry["key"] == record.key:
                return str(entry["sent_message_id"])
        return None

    async def fetch(self, inbox_id: str, message_id: str) -> dict[str, Any]:
        raise SendError(SendFailure.REJECTED, "dry run: cannot fetch a message without an API key")

    async def thread(self, inbox_id: str, thread_id: str) -> list[dict[str, Any]]:
        """Without an API key there is no thread to read: the replies sent to it, dry."""
        return [
            {
                "message_id": e["sent_message_id"],
                "from": e["inbox_id"],
                "text": e["reply_text"],
                "labels": ["sent"],
                "timestamp": e["created_at"],
            }
            for e in self.sent
            if e.get("thread_key", "").endswith(thread_id)
        ]

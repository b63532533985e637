"""The dry run: what would have been sent, when a provider has no API key.

:class:`DryRunOutbox` keeps the replies (in memory and in one JSON-lines file shared by
every provider's dry run). :class:`DryRun` is the part of a provider's dry-run client
that does not depend on the provider's shapes; each provider package subclasses it with
:meth:`DryRun.shaped`, its sent replies as the provider's API would return them in a
thread (``onceonly.processors.mail.agentmail.dry_run``, ``onceonly.processors.mail.nylas.dry_run``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.messages import FoundReply
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.mail")

#: the outbox's file, under ONCEONLY_RUN_DIR
OUTBOX_FILE = "dry-run-outbox.jsonl"


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
                return FoundReply(str(entry["sent_message_id"]), entry.get("reply_text"))
        return None

    def in_thread(self, channel: str, thread_id: str) -> list[dict[str, Any]]:
        """The replies sent (dry) by ``channel`` to a thread, in the order sent."""
        return [
            e
            for e in self.sent
            if e.get("channel", "agentmail") == channel
            and e.get("thread_key", "") == f"{channel}:{thread_id}"
        ]


def sent_at(entry: dict[str, Any]) -> datetime | None:
    """When an outbox entry was written (its ledger record's ``created_at``)."""
    try:
        return datetime.fromisoformat(str(entry.get("created_at")))
    except ValueError:
        return None


@dataclass
class DryRun:
    """A provider's client without an API key: replies go to ``outbox``; nothing is fetched
    or listed; a thread holds the replies sent to it, in the provider's shapes."""

    outbox: DryRunOutbox
    #: the provider (the ``channel`` of its ledger records)
    channel: str = field(default="", init=False)

    @property
    def dry_run(self) -> bool:
        return True

    async def reply(self, record: ReplyRecord) -> str:
        return await self.outbox.reply(record)

    async def find_reply(self, record: ReplyRecord) -> str | None:
        return await self.outbox.find_reply(record)

    async def fetch(self, account: str, message_id: str) -> dict[str, Any]:
        raise SendError(SendFailure.REJECTED, "dry run: cannot fetch a message without an API key")

    async def thread(self, account: str, thread_id: str) -> list[dict[str, Any]]:
        """Without an API key there is no thread to read: the replies sent to it, dry."""
        own = await self.address(account)
        return [
            self.shaped(e, thread_id, own) for e in self.outbox.in_thread(self.channel, thread_id)
        ]

    async def messages_since(self, account: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        """A dry run lists nothing: catch-up needs the provider's API."""
        nothing: list[dict[str, Any]] = []
        for message in nothing:
            yield message

    async def address(self, account: str) -> str | None:
        return None

    async def webhook_enabled(self, webhook_id: str) -> bool | None:
        """A dry run reads no webhook."""
        return None

    async def aclose(self) -> None:
        return None

    def shaped(self, entry: dict[str, Any], thread_id: str, own: str | None) -> dict[str, Any]:
        """One sent reply as the provider's API returns a message of a thread."""
        raise NotImplementedError

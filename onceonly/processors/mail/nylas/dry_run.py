"""Nylas without an API key: replies go to the dry-run outbox, and a thread holds them as
Nylas returns its messages (``id``, ``from`` as a participant list, ``body``, ``date`` in
epoch seconds, filed in ``SENT``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onceonly.processors.mail.outbox import DryRun, sent_at


@dataclass
class NylasDryRun(DryRun):
    #: the grant's own address (ONCEONLY_NYLAS_GRANT_EMAIL), if configured
    own_address: str | None = None
    channel: str = field(default="nylas", init=False)

    async def address(self, account: str) -> str | None:
        return self.own_address

    def remember(self, grant_id: str, message: Mapping[str, Any]) -> object:
        """Nothing to keep: a dry run builds no payload for Nylas."""
        return None

    def shaped(self, entry: dict[str, Any], thread_id: str, own: str | None) -> dict[str, Any]:
        when = sent_at(entry)
        return {
            "object": "message",
            "id": entry["sent_message_id"],
            "grant_id": entry["inbox_id"],
            "thread_id": thread_id,
            "from": [{"email": own}] if own else [],
            "body": entry["reply_text"],
            "date": int(when.timestamp()) if when else 0,
            "folders": ["SENT"],
        }

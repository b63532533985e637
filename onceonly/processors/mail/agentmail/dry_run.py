"""AgentMail without an API key: replies go to the dry-run outbox, and a thread holds them
as AgentMail returns its messages (``message_id``, ``from``, ``text``, ``labels``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onceonly.processors.mail.outbox import DryRun


@dataclass
class AgentMailDryRun(DryRun):
    channel: str = field(default="agentmail", init=False)

    async def address(self, account: str) -> str | None:
        return account  # an AgentMail inbox id is its address

    def shaped(self, entry: dict[str, Any], thread_id: str, own: str | None) -> dict[str, Any]:
        return {
            "inbox_id": entry["inbox_id"],
            "thread_id": thread_id,
            "message_id": entry["sent_message_id"],
            "in_reply_to": entry["message_id"],
            "from": own or entry["inbox_id"],
            "text": entry["reply_text"],
            "labels": ["sent"],
            "timestamp": entry["created_at"],
        }

"""What catch-up reads of an AgentMail inbox: every message after a time, page by page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from email.utils import parseaddr
from typing import Any

from agentmail import AsyncAgentMail

PAGE = 100


def is_answerable(message: Mapping[str, Any], inbox_id: str) -> bool:
    """Mail the inbox received from someone else (not the agent's own)."""
    labels = message.get("labels") or ()
    sender = parseaddr(str(message.get("from") or message.get("from_") or ""))[1].lower()
    return "received" in labels and "sent" not in labels and sender != inbox_id.lower()


async def list_messages(
    client: AsyncAgentMail, inbox_id: str, since: datetime
) -> AsyncIterator[dict[str, Any]]:
    """Every message after ``since``, oldest first, through all pages."""
    token: str | None = None
    while True:
        page = await client.inboxes.messages.list(
            inbox_id, after=since, ascending=True, limit=PAGE, page_token=token
        )
        for item in page.messages or []:
            yield item.model_dump(by_alias=True, mode="json")
        token = page.next_page_token
        if not token:
            return

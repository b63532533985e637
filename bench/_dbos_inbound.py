"""What the DBOS app (``bench.dbos_app``) reads of a record, and the reply's idempotency key.

Standard library only: the app runs in its own virtualenv and imports nothing of onceonly;
the unit tests check that its key is onceonly's (``onceonly.processors.writer.contract.reply_key``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Inbound:
    """What the workflow needs of a received message."""

    inbox_id: str
    message_id: str
    text: str | None

    @property
    def key(self) -> str:
        """onceonly's reply key: only ``A-Z a-z 0-9 - . _ ~``, as AgentMail allows."""
        return "reply-" + hashlib.sha256(f"{self.inbox_id}\n{self.message_id}".encode()).hexdigest()


def parse(value: str | bytes | None) -> Inbound | None:
    """The received message in an envelope from the deliveries topic; None for any other
    event (or a record that is not an AgentMail ``message.received``)."""
    if value is None:
        return None
    envelope: dict[str, Any] = json.loads(value)
    if envelope.get("event_type") != "message.received":
        return None
    message = json.loads(envelope["raw"]).get("message") or {}
    inbox_id, message_id = message.get("inbox_id"), message.get("message_id")
    if not inbox_id or not message_id:
        return None
    return Inbound(str(inbox_id), str(message_id), message.get("text"))

"""What the reply_once tests give it: an in-memory sender, and the parts of a run."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from onceonly.processors.exceptions import SendError
from onceonly.processors.reply.once import ReplyParts, SendPolicy, simple_write
from onceonly.schemas.ledger import ReplyRecord

#: three send attempts, retried at once
FAST = SendPolicy(attempts=3, backoff_initial_s=0.001, backoff_max_s=0.002)


class StubSender:
    """Sends ``<sent-N@x>``, raising ``failures`` first, in order; a thread read raises
    ``read_failures`` first, in order, then finds ``found``. Notes each record it was
    given to send (``tried``), each it sent, and the key of each thread read."""

    def __init__(
        self,
        *failures: SendError,
        found: str | None = None,
        read_failures: Iterable[SendError] = (),
    ) -> None:
        self.failures = list(failures)
        self.read_failures = list(read_failures)
        self.found = found
        self.tried: list[ReplyRecord] = []
        self.sent: list[ReplyRecord] = []
        self.reads: list[str] = []

    async def reply(self, record: ReplyRecord) -> str:
        self.tried.append(record)
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(record)
        return f"<sent-{len(self.sent)}@x>"

    async def find_reply(self, record: ReplyRecord) -> str | None:
        self.reads.append(record.key)
        if self.read_failures:
            raise self.read_failures.pop(0)
        return self.found


def reply_parts(
    ledger: Any,
    sender: Any,
    writer: Callable[..., Any],
    dead_letter: Any,
    now: Callable[[], datetime],
    **options: Any,
) -> ReplyParts:
    """reply_once's parts: ``writer`` a plain writer (:func:`simple_write`), the sends as
    :data:`FAST` unless ``options`` give a policy, and any other part ``options`` give."""
    given = {"ledger": ledger, "sender": sender, "dead_letter": dead_letter, "now": now}
    return ReplyParts(**given | {"write": simple_write(writer), "policy": FAST} | options)

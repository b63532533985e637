"""What a catch-up at size starts from: an inbox whose webhooks were lost, some of its mail
answered in the reply ledger (shared by ``bench/catchup_size.py`` and its integration test)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from onceonly.foundation.kafka import AsyncProducer, Connection, read_to_end
from onceonly.foundation.settings import Settings
from onceonly.processors.messages import reply_key
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.agentmail_server import FakeAgentMail

#: mail in a thread: a lost conversation of a few messages, as an outage leaves them
PER_THREAD = 4


def message_id(n: int) -> str:
    return f"<lost-{n:06d}@example.com>"


def seed_inbox(mail: FakeAgentMail, inbox: str, count: int, *, span_s: float = 86_400) -> float:
    """``count`` received messages over the last ``span_s`` seconds, oldest first, a thread
    per :data:`PER_THREAD`; the time of the first (list after it)."""
    now = mail.now()
    first = now - span_s
    step = span_s / max(count, 1)
    for n in range(count):
        mail.seed_message(
            inbox,
            message_id=message_id(n),
            thread_id=f"thr-{n // PER_THREAD:06d}",
            timestamp=first + n * step,
        )
    return first


async def answer(settings: Settings, inbox: str, numbers: range) -> list[str]:
    """Sent replies in the ledger for the messages ``numbers``; their reply keys."""
    producer = AsyncProducer(Connection.from_settings(settings))
    keys = []
    try:
        now = datetime.now(UTC)
        for n in numbers:
            key = reply_key(inbox, message_id(n))
            record = ReplyRecord(
                key,
                inbox,
                message_id(n),
                f"agentmail:thr-{n // PER_THREAD:06d}",
                ReplyState.SENT,
                now,
                message_at=now,
            )
            await producer.produce(settings.ledger_topic, record.encode(), key=key.encode())
            keys.append(key)
    finally:
        producer.close()
    return keys


def queued(settings: Settings) -> Counter[str]:
    """The message ids on the deliveries topic, with how often each is there."""
    records = read_to_end(Connection.from_settings(settings), settings.deliveries_topic)
    return Counter(Envelope.decode(r.value()).message_id or "" for r in records)

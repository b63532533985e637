"""A ledger with a past: the records a stack that has answered for a while holds."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from onceonly.foundation.kafka import Connection, sync_producer
from onceonly.foundation.settings import Settings
from onceonly.schemas.ledger import ReplyRecord, ReplyState

#: librdkafka's local queue holds at most this many records: flush before it is full
_FLUSH_EVERY = 50_000


def earlier_reply(n: int, at: datetime) -> ReplyRecord:
    """The settled record of an earlier reply, to a message of another thread."""
    message_id = f"<history-{n}-{uuid.uuid4().hex[:8]}@example.com>"
    return ReplyRecord(
        key=f"reply-history-{n:08d}",
        inbox_id="support@agentmail.to",
        message_id=message_id,
        thread_key=f"agentmail:thr_history_{n % 5000}",
        state=ReplyState.SENT,
        created_at=at,
        reply_text="Thank you, we will get back to you shortly.",
        sent_message_id=f"<sent-{n}@example.com>",
        attempts=1,
    )


def seed_ledger(env: dict[str, str], *, records: int) -> None:
    """Write ``records`` settled replies of earlier threads to the stack's ledger topic."""
    settings = Settings.from_env(
        kafka_bootstrap=env["ONCEONLY_KAFKA_BOOTSTRAP"],
    )
    producer = sync_producer(Connection.from_settings(settings))
    at = datetime.now(UTC)
    for n in range(records):
        record = earlier_reply(n, at)
        producer.produce(settings.ledger_topic, key=record.key.encode(), value=record.encode())
        if n % _FLUSH_EVERY == _FLUSH_EVERY - 1:
            producer.flush()
    left = producer.flush(60)
    assert left == 0, f"{left} history records not acknowledged within 60 s"

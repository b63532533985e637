"""The ledger after Kafka's log cleaner compacted it, on a real broker: a worker that starts
without local state recovers each reply's last record from what compaction left (offsets
with gaps), through faust's record-by-record replay and through the bulk load, and
answers none of the messages again when they are delivered again.

The topic is made to compact at once the way an operator would tune it
(``segment.ms``, ``min.cleanable.dirty.ratio``, set with the admin API), and the test
waits until the broker's cleaner has removed the *pending* records, so the recovery reads
a compacted log, not one the cleaner has yet to reach."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from tests.conftest import consume_all
from tests.integration.workers import INBOX, Stack, ledger_records, until

pytestmark = pytest.mark.integration

MESSAGES = [(f"<cmp-{i}@example.com>", f"t-cmp-{i}") for i in range(3)]
CLEANER_S = 120  # the broker's cleaner wakes every 15 s (log.cleaner.backoff.ms)


def _compact_soon(stack: Stack) -> None:
    """Let the broker's cleaner take the ledger's records at once: a segment rolls at the
    next record, any dirty share is enough, and no record is too young."""
    admin = AdminClient({"bootstrap.servers": stack.settings.kafka_bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        stack.settings.ledger_topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in (
                ("segment.ms", "100"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("min.compaction.lag.ms", "0"),  # onceonly creates it with 10 min
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _ledger_offsets(stack: Stack) -> dict[str, list[tuple[int, ReplyState]]]:
    """Each key's records on the ledger topic: (offset, state), in log order."""
    found: dict[str, list[tuple[int, ReplyState]]] = {}
    for msg in consume_all(stack.settings, stack.settings.ledger_topic):
        value = msg.value()
        if value is not None:
            found.setdefault(msg.key().decode(), []).append(
                (int(msg.offset()), ReplyRecord.decode(value).state)
            )
    return found


@pytest.mark.parametrize("bulk_min_records", [0, 1], ids=["faust-replay", "bulk-load"])
async def test_a_worker_without_state_recovers_a_compacted_ledger_and_answers_nothing_again(
    stack_factory: Callable[..., Stack], bulk_min_records: int
) -> None:
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    first = stack.worker("w1")
    for count, (message, thread) in enumerate(MESSAGES, 1):  # one at a time: gaps between
        await stack.deliver(stack.seed(message, thread, text="hello"))
        await stack.until_sent(count)
    keys = [reply_key(INBOX, message) for message, _ in MESSAGES]
    before = _ledger_offsets(stack)
    assert all(ReplyState.PENDING in [s for _, s in before[k]] for k in keys), before
    first.kill()

    _compact_soon(stack)
    # a record after the change rolls the segment that holds the replies' records; it is
    # a ledger record of a message nobody delivers, so the recovery reads it as any other
    filler = ReplyRecord(
        "reply-filler", INBOX, "<filler@example.com>", "agentmail:t-filler",
        ReplyState.SENT, datetime.now(UTC), "filler", sent_message_id="<filler-sent@x>",
    )  # fmt: skip
    await stack.producer.produce(
        stack.settings.ledger_topic, filler.encode(), key=filler.key.encode(), partition=0
    )
    await until(
        stack,
        lambda: all(
            [s for _, s in _ledger_offsets(stack).get(k, [])] == [ReplyState.SENT] for k in keys
        ),
        "the cleaner's removal of the pending records",
        timeout_s=CLEANER_S,
    )
    offsets = sorted(o for records in _ledger_offsets(stack).values() for o, _ in records)
    assert offsets[0] > 0 and offsets != list(range(offsets[0], offsets[-1] + 1)), offsets

    second = stack.worker("w2", ONCEONLY_RESTORE_BULK_MIN_RECORDS=str(bulk_min_records))
    for message, thread in MESSAGES:  # delivered again, under new event ids
        again = payloads.agentmail_received(
            inbox_id=INBOX, thread_id=thread, message_id=message, text="hello"
        )
        await stack.deliver(again)
    await until(
        stack,
        lambda: (
            second.log().count("reply skipped: already handled") >= len(MESSAGES)
            or len(stack.mail.outbox) > len(MESSAGES)
        ),
        "each message skipped, or answered again",
    )

    assert sorted(e.replied_to_message_id for e in stack.mail.outbox) == sorted(
        m for m, _ in MESSAGES
    )
    assert all(ledger_records(stack)[k].state is ReplyState.SENT for k in keys)
    if bulk_min_records:
        assert "bulk restore of" in second.log()

"""The simulator's findings F51 and F52 made real: a writer that stopped between its reply's
record and the records of the other messages it saw (covered by that reply) leaves them
with no record. Given the burst again, the next worker (a real process, the real broker)
records them covered by that reply, and never writes one a reply of its own.

The stopped writer's record is landed in the ledger topic by the test, as that writer left
it: m2's reply, whose writer saw m1, and nothing for m1. F52: the reply is a draft awaiting
approval (approval on), and m3's draft, written since by a writer that never saw m1, is the
burst's latest; approved, m2's one email answers m1 too. F51: m2's reply is the latest and
a failed send (its text kept, its dead letter's retry sends it); nothing is written or sent
for m1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.integration.workers import (
    INBOX,
    Stack,
    ledger_records,
    onceonly,
    until,
    writer_calls,
    writer_env,
)

pytestmark = pytest.mark.integration

THREAD = "t-stopped"
M1, M2, M3 = "<m1@stopped>", "<m2@stopped>", "<m3@stopped>"
K1, K2, K3 = (reply_key(INBOX, m) for m in (M1, M2, M3))
TEXT = "the stopped writer's reply to m1 and m2"
MINUTE = {M1: 0, M2: 1, M3: 2}  #: each message's time: 10:00, 10:01, 10:02


async def _landed(
    stack: Stack, message: str, state: ReplyState, text: str, covers: tuple[str, ...]
) -> ReplyRecord:
    """``message``'s reply in ``state``, whose writer saw ``covers``, landed in the ledger."""
    now = datetime.now(UTC)
    record = ReplyRecord(
        reply_key(INBOX, message),
        INBOX,
        message,
        f"agentmail:{THREAD}",
        state,
        now,
        text,
        attempts=5 if state is ReplyState.FAILED else 0,
        error="retryable: 503" if state is ReplyState.FAILED else None,
        message_at=datetime(2026, 11, 29, 10, MINUTE[message], tzinfo=UTC),
        covers=covers,
        written_at=now,
    )
    ledger = stack.settings.ledger_topic
    await stack.producer.produce(ledger, record.encode(), key=record.key.encode(), partition=0)
    return record


async def _burst_again(stack: Stack, *messages: str) -> None:
    """``messages`` delivered together (one burst in the 3 s window); m1 recorded covered."""
    payloads = [
        stack.seed(m, THREAD, timestamp=f"2026-11-29T10:0{MINUTE[m]}:00.000Z") for m in messages
    ]
    await asyncio.gather(*(stack.deliver(p) for p in payloads))

    def covered() -> bool:
        record = ledger_records(stack).get(K1)
        return record is not None and record.state is ReplyState.COVERED

    await until(stack, covered, "m1 recorded covered")


async def test_a_message_a_stopped_writers_draft_saw_is_covered_by_it_and_answered_once(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=1, reorder_window_ms=3000)
    await _landed(stack, M2, ReplyState.AWAITING, TEXT, (K1,))
    await _landed(stack, M3, ReplyState.AWAITING, "m3's draft, its writer never saw m1", ())
    stack.worker(ONCEONLY_APPROVAL="always", **writer_env(stack))

    await _burst_again(stack, M1, M2, M3)
    records = ledger_records(stack)
    assert records[K1].covered_by == K2  # not a draft of its own
    assert {k for k, r in records.items() if r.state is ReplyState.AWAITING} == {K2, K3}
    approved = onceonly(stack, "approvals", "approve", K2, "--by", "ana")
    assert approved.returncode == 0, approved.stderr + approved.stdout
    await stack.until_sent(1)
    await until(stack, lambda: ledger_records(stack)[K2].state is ReplyState.SENT, "m2 sent")

    assert [(e.replied_to_message_id, e.text) for e in stack.mail.outbox] == [(M2, TEXT)]
    assert writer_calls(stack) == []


async def test_a_message_a_stopped_writers_failed_send_saw_is_covered_by_it_not_written(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=1, reorder_window_ms=3000)
    failed = await _landed(stack, M2, ReplyState.FAILED, TEXT, (K1,))
    stack.worker(**writer_env(stack))

    await _burst_again(stack, M1, M2)
    records = ledger_records(stack)

    assert records[K1].covered_by == K2
    assert records[K2] == failed  # left for its dead letter's retry, which sends it
    assert (writer_calls(stack), stack.mail.outbox) == ([], [])

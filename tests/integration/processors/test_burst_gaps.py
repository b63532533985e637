"""A lost webhook, caught up: the missed message gets a reply of its own, on real workers.

Message 1's webhook never came; message 2 (same thread, later) was answered. ``onceonly
catch-up`` then feeds both messages (it feeds answered ones too: the ledger skips them),
and the worker releases them together in one burst. Message 2's reply was written
without message 1, so it cannot cover it: message 1 is answered by its own reply.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from testkit import payloads
from tests.integration.holds import held_text
from tests.integration.workers import (
    INBOX,
    Stack,
    ledger_records,
    model_calls,
    onceonly,
    restart_mid_send,
    state_of,
    until,
)

pytestmark = pytest.mark.integration

FIRST, SECOND = "<gap-1@example.com>", "<gap-2@example.com>"
THREAD = "t-gap"


def _writer_calls(stack: Stack) -> list[list[str]]:
    return [call["ids"] for call in model_calls(stack)]


def _held(stack: Stack) -> str:
    """What the thread holds in the holds changelog, as text."""
    return held_text(stack.settings, f"agentmail:{THREAD}")


def _seed(stack: Stack, message_id: str, timestamp: str) -> dict[str, Any]:
    stack.mail.seed_message(INBOX, message_id=message_id, thread_id=THREAD, timestamp=timestamp)
    return payloads.agentmail_received(
        inbox_id=INBOX, thread_id=THREAD, message_id=message_id, timestamp=timestamp
    )


async def test_a_message_whose_webhook_was_lost_gets_its_own_reply_when_caught_up(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()  # a reorder window of 1 s: catch-up's two records are one burst
    stack.worker(
        ONCEONLY_REPLY_WRITER="tests.integration.writers:model",
        ONCEONLY_TEST_WRITER_LOG=str(stack.tmp / "writer.jsonl"),
    )
    _seed(stack, FIRST, "2026-11-29T10:00:00.000Z")  # its webhook is lost
    await stack.deliver(_seed(stack, SECOND, "2026-11-29T10:01:00.000Z"))
    await stack.until_sent(1)

    done = onceonly(stack, "catch-up", "--inbox", INBOX, "--since", "2026-11-29", "--wait-s", "60")
    assert done.returncode == 0, done.stderr + done.stdout
    first = reply_key(INBOX, FIRST)
    answered = (ReplyState.SENT, ReplyState.COVERED)  # a reply is sent before it is recorded
    await until(
        stack,
        lambda: state_of(stack, first) in answered,
        "message 1 answered in the ledger",
    )

    record = ledger_records(stack)[first]
    assert (record.state, record.covered_by) == (ReplyState.SENT, None)
    sent = Counter(e.replied_to_message_id for e in stack.mail.outbox)
    assert sent == Counter({FIRST: 1, SECOND: 1})
    assert _writer_calls(stack) == [[SECOND], [FIRST]]


async def test_a_pending_reply_released_with_a_newer_message_is_sent_with_its_stored_text(
    stack_factory: Callable[..., Stack],
) -> None:
    # A's reply is recorded *pending* and its send is in flight when the worker dies; B
    # (same thread, later) is held meanwhile. The restart releases [A, B] together: A's
    # stored text must go out with its key, and the writer is not asked for A again
    stack = stack_factory(reorder_window_ms=1000)
    worker = stack.worker(
        ONCEONLY_REPLY_WRITER="tests.integration.writers:model",
        ONCEONLY_TEST_WRITER_LOG=str(stack.tmp / "writer.jsonl"),
        ONCEONLY_TEST_WRITER_VARY="1",
    )
    first, second = "<pend-a@example.com>", "<pend-b@example.com>"
    stack.mail.faults.send_delay_s = 6.0  # A's send is in flight when the worker dies
    await stack.deliver(_seed(stack, first, "2026-11-29T10:00:00.000Z"))
    key_a = reply_key(INBOX, first)
    await until(stack, lambda: key_a in ledger_records(stack), "A's pending record")
    await stack.deliver(_seed(stack, second, "2026-11-29T10:01:00.000Z"))
    await until(stack, lambda: second in _held(stack), "B in the holds table")
    pending = restart_mid_send(stack, worker, key_a)
    key_b = reply_key(INBOX, second)

    def both_sent() -> bool:
        records = ledger_records(stack)
        return all(k in records and records[k].state is ReplyState.SENT for k in (key_a, key_b))

    await until(stack, both_sent, "both replies sent")

    texts = {e.replied_to_message_id: e.text for e in stack.mail.outbox}
    assert Counter(e.replied_to_message_id for e in stack.mail.outbox) == {first: 1, second: 1}
    assert texts[first] == pending.reply_text
    assert [ids for ids in _writer_calls(stack) if ids[-1] == first] == [[first]]

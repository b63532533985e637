"""The model behind the reply: slow, failing, hanging and blocking writers, at the default
window, on real worker processes, the real broker and AgentMail's API on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import INBOX, Stack, ledger_records, until
from tests.integration.workers import dead_letters as _dead_letters
from tests.integration.workers import model_calls as _calls
from tests.integration.workers import model_env as _env
from tests.integration.workers import sent_to as _sent_to

pytestmark = pytest.mark.integration

WINDOW_MS = 2000  # the default


def _calls_per_message(stack: Stack) -> Counter[str]:
    return Counter(call["ids"][-1] for call in _calls(stack))


async def _deliver_threads(stack: Stack, texts: dict[str, str]) -> dict[str, str]:
    """One message per thread; returns thread -> message id."""
    ids = {}
    for n, (thread, text) in enumerate(texts.items()):
        ids[thread] = f"<m{n}-{thread}@example.com>"
        await stack.deliver(stack.seed(ids[thread], thread, text=text))
    return ids


async def test_a_writer_that_always_fails_dead_letters_that_message_and_answers_the_rest_once(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack, ONCEONLY_WRITER_ATTEMPTS="2"))
    texts = {f"t{n}": "hello" for n in range(8)}
    texts["t-bad"] = "ALWAYS-FAIL"
    ids = await _deliver_threads(stack, texts)

    await until(stack, lambda: len(stack.mail.outbox) >= 8, "8 emails")
    await until(stack, lambda: bool(_dead_letters(stack)), "the dead letter")
    await asyncio.sleep(1)

    (letter,) = _dead_letters(stack)
    assert letter["check"] == "writer_failed"
    assert "429" in letter["last_error"]
    assert [e["message"]["message_id"] for e in map(_payload, letter["envelopes"])] == [
        ids["t-bad"]
    ]
    assert _sent_to(stack) == Counter({ids[t]: 1 for t in texts if t != "t-bad"})
    calls = _calls_per_message(stack)
    assert calls == Counter({**{ids[t]: 1 for t in texts if t != "t-bad"}, ids["t-bad"]: 2})
    assert ledger_records(stack)[reply_key(INBOX, ids["t-bad"])].state is ReplyState.FAILED


def _payload(envelope: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(envelope["raw"]))


async def test_a_writer_that_raises_once_gives_one_email_from_two_calls(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack))
    ids = await _deliver_threads(stack, {"t-flaky": "FAIL-ONCE"})

    await stack.until_sent(1)
    await asyncio.sleep(1)

    assert _sent_to(stack) == Counter({ids["t-flaky"]: 1})
    assert len(_calls(stack)) == 2
    assert _dead_letters(stack) == []


async def test_a_writer_that_hangs_is_retried_then_dead_lettered_while_others_are_answered(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack, ONCEONLY_WRITER_TIMEOUT_S="1.5", ONCEONLY_WRITER_ATTEMPTS="2"))
    ids = await _deliver_threads(stack, {"t-hang": "HANG", "t1": "hi", "t2": "hi"})

    await until(stack, lambda: len(stack.mail.outbox) >= 2, "2 emails")
    await until(stack, lambda: bool(_dead_letters(stack)), "the dead letter")

    assert _sent_to(stack) == Counter({ids["t1"]: 1, ids["t2"]: 1})
    (letter,) = _dead_letters(stack)
    assert letter["check"] == "writer_failed"
    assert "WriterTimeout" in letter["last_error"]
    assert _calls_per_message(stack)[ids["t-hang"]] == 2


async def test_a_blocking_sync_writer_runs_in_threads_and_the_worker_stays_in_its_group(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    worker = stack.worker(
        **_env(
            stack,
            ONCEONLY_REPLY_WRITER="tests.integration.writers:sync_model",
            ONCEONLY_TEST_WRITER_DELAY_S="2",
            ONCEONLY_WRITER_CONCURRENCY="16",
        )
    )
    await until(stack, lambda: "worker ready" in worker.log(), "the worker")
    ids = await _deliver_threads(stack, {f"t{n}": "hi" for n in range(30)})

    await until(stack, lambda: len(stack.mail.outbox) >= 30, "30 emails", timeout_s=60)

    ends = {e["ids"][-1]: e["at"] for e in _calls(stack, "end")}
    spans = [(s["at"], ends[s["ids"][-1]]) for s in _calls(stack)]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most == 16  # the calls overlap, up to the concurrency
    assert _sent_to(stack) == Counter({m: 1 for m in ids.values()})
    assert worker.log().count("tables recovered") == 1  # one recovery: no rebalance


async def test_a_slow_conversation_holds_up_no_other_on_the_same_partition(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS, partitions=1)
    worker = stack.worker(**_env(stack, ONCEONLY_TEST_WRITER_DELAY_S="0.5"))
    await until(stack, lambda: "worker ready" in worker.log(), "the worker")
    await _deliver_threads(stack, {"t-slow": "SLOW=30"})
    await asyncio.sleep(0.5)

    started = time.monotonic()
    ids = await _deliver_threads(stack, {f"t{n}": "hi" for n in range(6)})
    await until(stack, lambda: len(stack.mail.outbox) >= 6, "6 emails", timeout_s=30)
    elapsed = time.monotonic() - started

    assert elapsed <= WINDOW_MS / 1000 + 0.5 + 2
    assert _sent_to(stack) == Counter({m: 1 for m in ids.values()})


async def test_a_kill_with_model_calls_in_flight_answers_each_once_and_keeps_recorded_texts(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    worker = stack.worker(**_env(stack))
    stack.mail.faults.send_delay_s = 30.0  # recorded texts wait for their send
    recorded = await _deliver_threads(stack, {f"r{n}": "hi" for n in range(5)})
    keys = {reply_key(INBOX, m) for m in recorded.values()}
    await until(stack, lambda: keys <= set(ledger_records(stack)), "5 pending records")
    writing = await _deliver_threads(stack, {f"w{n}": "SLOW=20" for n in range(5)})
    await until(stack, lambda: len(_calls(stack)) >= 10, "5 model calls in flight")

    worker.kill()
    stack.mail.faults.send_delay_s = 0.0
    worker.start()
    await until(stack, lambda: len(stack.mail.outbox) >= 10, "10 emails", timeout_s=120)
    await asyncio.sleep(1)

    assert _sent_to(stack) == Counter({m: 1 for m in [*recorded.values(), *writing.values()]})
    calls = _calls_per_message(stack)
    assert {m: calls[m] for m in recorded.values()} == {m: 1 for m in recorded.values()}
    assert all(calls[m] == 2 for m in writing.values())


async def test_a_message_that_arrives_while_the_reply_is_written_gets_the_one_reply(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    worker = stack.worker(**_env(stack, ONCEONLY_TEST_WRITER_DELAY_S="3"))
    await until(stack, lambda: "worker ready" in worker.log(), "the worker")
    first = stack.seed("<a@example.com>", "t-both", timestamp="2026-11-29T10:00:00.000Z")
    await stack.deliver(first)
    await until(stack, lambda: len(_calls(stack)) >= 1, "the writer's first call")
    second = stack.seed("<b@example.com>", "t-both", timestamp="2026-11-29T10:01:00.000Z")
    await stack.deliver(second)

    await stack.until_sent(1)
    await asyncio.sleep(WINDOW_MS / 1000 + 2)

    assert _sent_to(stack) == Counter({"<b@example.com>": 1})
    assert _calls(stack)[-1]["ids"] == ["<a@example.com>", "<b@example.com>"]
    covered = ledger_records(stack)[reply_key(INBOX, "<a@example.com>")]
    assert covered.state is ReplyState.COVERED
    assert covered.covered_by == reply_key(INBOX, "<b@example.com>")


async def test_a_declined_message_is_recorded_and_never_written_again(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack))
    payload = stack.seed("<d@example.com>", "t-decline", text="DECLINE")
    key = reply_key(INBOX, "<d@example.com>")
    await stack.deliver(payload)
    await until(stack, lambda: key in ledger_records(stack), "the ledger record")

    again = {**payload, "event_id": "evt-the-same-message-again"}  # as catch-up would send
    await stack.deliver(again)
    await asyncio.sleep(WINDOW_MS / 1000 + 2)

    assert ledger_records(stack)[key].state is ReplyState.DECLINED
    assert stack.mail.outbox == []
    assert len(_calls(stack)) == 1


async def test_the_writer_reads_the_threads_earlier_messages_its_own_replies_included(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack))
    stack.mail.seed_message(INBOX, message_id="<old@example.com>", thread_id="t-history")
    stack.mail.seed_message(
        INBOX,
        message_id="<our-reply@agentmail.to>",
        thread_id="t-history",
        from_=INBOX,
        labels=["sent"],
        in_reply_to="<old@example.com>",
    )
    await stack.deliver(stack.seed("<new@example.com>", "t-history", text="HISTORY"))

    await stack.until_sent(1)

    assert stack.mail.outbox[0].text == "history: <old@example.com> <our-reply@agentmail.to>(own)"


async def test_an_effect_from_the_writer_is_performed_once_across_a_retry(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=WINDOW_MS)
    stack.worker(**_env(stack))
    await stack.deliver(stack.seed("<e@example.com>", "t-effect", text="EFFECT FAIL-ONCE"))

    await stack.until_sent(1)

    assert len(_calls(stack)) == 2
    effects = (stack.tmp / "effects.log").read_text().splitlines()
    assert len(effects) == 1

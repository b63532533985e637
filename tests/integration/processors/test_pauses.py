"""Slow model calls across kills and commits, and a worker paused past its session: on
real worker processes, the real broker and AgentMail's API on loopback."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable

import pytest

from onceonly.foundation.kafka import Connection, consumer_lag
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import (
    INBOX,
    SESSION_S,
    Stack,
    WorkerProcess,
    ledger_records,
    model_env,
    until,
    verdict,
)
from tests.integration.workers import dead_letters as _dead_letters
from tests.integration.workers import model_calls as _calls
from tests.integration.workers import sent_to as _sent_to

pytestmark = pytest.mark.integration


def _env(stack: Stack, **extra: str) -> dict[str, str]:
    """The model-like writer, with a text that varies from call to call."""
    return model_env(stack, ONCEONLY_TEST_WRITER_VARY="1", **extra)


def _committed(stack: Stack) -> int | None:
    """The group's committed offset of the deliveries topic's partition 0."""
    settings = stack.settings
    rows = consumer_lag(
        Connection.from_settings(settings), settings.app_id, settings.deliveries_topic
    )
    return next(row.committed for row in rows if row.partition == 0)


def _metric(worker: WorkerProcess, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+]+)$", worker.metrics(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def test_a_slow_call_across_a_kill_at_window_0_is_answered_once(
    stack_factory: Callable[..., Stack],
) -> None:
    # one partition: the slow conversation's record sits behind the others' offsets, which
    # finish and are committed while its model call runs
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    worker = stack.worker(**_env(stack))
    slow = "<slow@example.com>"
    await stack.deliver(stack.seed(slow, "thr-slow", text="SLOW=25"))
    await until(stack, lambda: len(_calls(stack)) == 1, "the slow call to start")
    others = [f"<o{n}@example.com>" for n in range(12)]
    for n, message in enumerate(others):
        await stack.deliver(stack.seed(message, f"thr-o{n}", text="hello"))
        await asyncio.sleep(0.5)
    await until(stack, lambda: set(_sent_to(stack)) >= set(others), "the others' emails")
    await asyncio.sleep(4)  # a commit interval (2.8 s) passes with the slow call running
    assert slow not in _sent_to(stack)
    assert _committed(stack) in (None, 0)  # never past the slow record (offset 0)

    worker.kill()
    worker.start()
    await until(stack, lambda: slow in _sent_to(stack), "the slow message's email", 120)
    # and once it is done, the commits move past all 13 (the book drives faust's commits)
    await until(stack, lambda: _committed(stack) == 1 + len(others), "the commit of all 13")

    judged = verdict(stack, [slow, *others])  # one email each, the ledger agreeing
    assert judged.passed and judged.count("answered") == 1 + len(others), judged.violations
    assert ledger_records(stack)[reply_key(INBOX, slow)].state is ReplyState.SENT


@pytest.mark.parametrize(
    ("window_ms", "keys"),
    [(0, "ignored"), (2000, "honoured")],
    ids=["window-0-keys-ignored", "window-2000-keys-honoured"],
)
async def test_a_worker_paused_past_its_session_sends_nothing_for_what_it_lost(
    stack_factory: Callable[..., Stack], window_ms: int, keys: str
) -> None:
    stack = stack_factory(partitions=4, reorder_window_ms=window_ms)
    stack.mail.ignore_keys(keys == "ignored")  # ignored: every second send is a second email
    env = _env(stack, ONCEONLY_TEST_WRITER_DELAY_S="3")
    paused = stack.worker("w1", **env)
    other = stack.worker("w2", **env)
    for worker in (paused, other):
        await until(stack, lambda w=worker: "worker ready" in w.log(), f"{worker.name} ready")
    await until(
        stack,
        lambda: all(w.log().count("joined the consumer group") >= 1 for w in (paused, other)),
        "both workers in the group",
    )
    threads = [f"thr-p{n}" for n in range(40)]
    messages = [f"<p{n}@example.com>" for n in range(40)]
    pairs = zip(messages, threads, strict=True)
    await asyncio.gather(*(stack.deliver(stack.seed(m, t, text="hello")) for m, t in pairs))
    pid = paused.pid
    await until(
        stack,
        lambda: sum(1 for c in _calls(stack) if c["pid"] == pid) >= 5,
        "model calls in flight on w1",
    )

    paused.signal(signal.SIGSTOP)  # past its session: w2 takes every partition over
    await asyncio.sleep(SESSION_S + 8)
    paused.signal(signal.SIGCONT)

    await until(stack, lambda: set(_sent_to(stack)) >= set(messages), "every email", 180)

    # every model call has ended (or was cancelled by a drain), and w1 met the fence
    def settled() -> bool:
        ends = sum(len(_calls(stack, e)) for e in ("end", "cancelled", "raise"))
        return len(_calls(stack)) == ends and _metric(paused, "onceonly_fenced_total") >= 1

    await until(stack, settled, "every model call ended, and w1 fenced")
    await asyncio.sleep(3)  # the last fenced lanes stand down, or (the bug) send

    judged = verdict(stack, messages)  # one email each, the ledger agreeing
    assert judged.passed and judged.count("answered") == len(messages), judged.violations
    records = ledger_records(stack)
    assert {m: records[reply_key(INBOX, m)].state for m in messages} == dict.fromkeys(
        messages, ReplyState.SENT
    )
    assert _dead_letters(stack) == []


async def test_a_sync_writer_performs_its_effect_once_through_the_worker(
    stack_factory: Callable[..., Stack],
) -> None:
    # the writer's thread had no record current: faust's table refused the effect's write
    # and every such message was dead-lettered writer_failed
    stack = stack_factory(reorder_window_ms=0)
    stack.worker(**_env(stack, ONCEONLY_REPLY_WRITER="tests.integration.writers:sync_effect"))
    message = "<e1@example.com>"
    await stack.deliver(stack.seed(message, "thr-e1", text="hello"))

    await until(stack, lambda: message in _sent_to(stack), "the email")

    effects = (stack.tmp / "effects.log").read_text().splitlines()
    assert len(effects) == 1 and effects[0].startswith("effect-")
    assert _dead_letters(stack) == []


async def test_a_drain_that_cancels_a_writer_calls_it_no_more(
    stack_factory: Callable[..., Stack],
) -> None:
    # the writer's retries caught the drain's CancelledError and called the writer again,
    # beside the partition's next owner
    stack = stack_factory(partitions=2, reorder_window_ms=0)
    env = _env(stack, ONCEONLY_DRAIN_GRACE_S="1", ONCEONLY_WRITER_TIMEOUT_S="600")
    first = stack.worker("w1", **env)
    await until(stack, lambda: "worker ready" in first.log(), "w1 ready")
    await stack.deliver(stack.seed("<h1@example.com>", "thr-h1", text="HANG"))
    await until(stack, lambda: len(_calls(stack)) == 1, "the hanging call")

    stack.worker("w2", **env)  # a rebalance: w1 drains, and cancels the hanging call
    await until(stack, lambda: "lanes drained" in first.log(), "w1's drain")

    drained = next(line for line in first.log().splitlines() if "lanes drained" in line)
    assert "still_running=0" in drained or '"still_running": 0' in drained
    assert [c["attempt"] for c in _calls(stack)] == [1] * len(_calls(stack))

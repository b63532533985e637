"""Flow control for the model, on real worker processes: the openai example writer against
the local chat-completions server, the real broker and AgentMail's API on loopback.

Scaled to fit the suite; the full sizes are ``make bench-flow`` (bench/flow.py)."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import Usage
from testkit import payloads
from testkit.fakes.openai_server import FakeChatModel
from testkit.invariants import most_in_window
from tests.integration.workers import (
    INBOX,
    Stack,
    dead_letters,
    ledger_records,
    onceonly,
    until,
    verdict,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def chat() -> Iterator[FakeChatModel]:
    with FakeChatModel().serving_in_thread() as fake:
        yield fake


def openai_env(chat: FakeChatModel, **extra: str) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "onceonly.processors.writer.openai:reply",
        "OPENAI_BASE_URL": f"{chat.base_url}/v1",
        "OPENAI_API_KEY": "test",
        "OPENAI_MODEL": "local-model",
        "ONCEONLY_WRITER_BACKOFF_S": "0.1",
        **extra,
    }


async def _deliver(stack: Stack, inbox: str, names: list[str]) -> dict[str, float]:
    """One message per thread to ``inbox``; returns message id -> when it was produced."""
    produced: dict[str, float] = {}
    for name in names:
        message_id = f"<{name}@example.com>"
        stack.mail.seed_message(inbox, message_id=message_id, thread_id=name)
        payload = payloads.agentmail_received(
            inbox_id=inbox, thread_id=name, message_id=message_id, text=f"hello {name}"
        )
        await stack.deliver(payload)
        produced[message_id] = time.monotonic()
    return produced


async def _shares(stack: Stack, workers: list[Any], share: str) -> None:
    await until(
        stack,
        lambda: all(f"onceonly_model_share {share}" in w.metrics() for w in workers),
        f"every worker's share of the budget at {share}",
        timeout_s=120,
    )


async def test_two_workers_keep_to_the_groups_rpm_not_twice_it(
    stack_factory: Callable[..., Stack], chat: FakeChatModel
) -> None:
    # 60 a minute for the group: 1 call a second, 0.5 for each worker. A limit applied per
    # worker would make 2 a second here, 20 calls in 10 s where the group allows 10.
    stack = stack_factory(reorder_window_ms=0, partitions=8)
    chat.latency_s = 0.2
    chat.usage = (120, 30)
    env = openai_env(chat, ONCEONLY_MODEL_RPM="60")
    workers = [stack.worker("w1", **env), stack.worker("w2", **env)]
    await _shares(stack, workers, "0.5")

    produced = await _deliver(stack, INBOX, [f"t{n}" for n in range(30)])
    await until(stack, lambda: len(chat.calls) >= 14, "14 model calls", timeout_s=60)

    starts = [at for at, _ in chat.calls]
    # the group's 10 in 10 s, one more per worker at a window's edge, and one more per worker
    # whose first call is counted late: the fake model (served by this test's own loop, busy
    # producing the 30 deliveries) timed both workers' first calls 2 s after their admission,
    # beside their second ones (4 calls in 0.1 s in a loaded run); a limit per worker makes 20
    assert most_in_window(starts, 10.0) <= 10 + 2 + 2
    assert most_in_window(starts[:14], 10.0) >= 8  # and at >= 0.8 x the rate meanwhile
    await until(stack, lambda: len(stack.mail.outbox) >= 30, "30 emails", timeout_s=120)
    judged = verdict(stack, produced, INBOX)
    assert judged.passed and judged.count("answered") == len(produced), judged.violations
    # what each reply cost is in the ledger and in the metrics
    ledger = ledger_records(stack)
    assert {ledger[reply_key(INBOX, m)].usage for m in produced} == {Usage("local-model", 120, 30)}
    counted = sum(
        _counter(w.metrics(), 'onceonly_writer_tokens_total{kind="input",model="local-model"}')
        for w in workers
    )
    assert counted == 30 * 120
    # and shown: by onceonly trace, and on the operator page with the day's totals
    traced = onceonly(stack, "trace", next(iter(produced)))
    assert "local-model: 120 in + 30 out tokens" in traced.stdout, traced.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{workers[0].port}/ops", timeout=30) as page:
        html = page.read().decode()
    usage = html[html.index('id="usage"') : html.index('id="lag"')]
    assert f"<td>{INBOX}</td><td>local-model</td><td>30</td><td>3600</td><td>900</td>" in usage


async def test_a_worker_takes_no_share_while_a_rebalance_moves_its_partitions(
    stack_factory: Callable[..., Stack], chat: FakeChatModel
) -> None:
    # finding F18 (c): a worker drained for a rebalance kept its share, and a call waiting
    # meanwhile started on it while the partitions' next owner paced them too
    stack = stack_factory(reorder_window_ms=0, partitions=8)
    env = openai_env(chat, ONCEONLY_MODEL_RPM="60")
    first = stack.worker("w1", **env)
    await _shares(stack, [first], "1.0")
    second = stack.worker("w2", **env)
    await _shares(stack, [first, second], "0.5")

    said = [
        line.split("share=")[1].split()[0]
        for line in first.log().splitlines()
        if "model budget share" in line
    ]
    assert said[:1] == ["1.0"] and said[-1] == "0.5", said
    assert "0.0" in said[said.index("1.0") :], said  # zero from the drain until assigned


def _counter(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_429_with_retry_after_pauses_the_worker_and_every_message_is_answered_once(
    stack_factory: Callable[..., Stack], chat: FakeChatModel
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    chat.latency_s = 0.1
    worker = stack.worker(**openai_env(chat, ONCEONLY_WRITER_ATTEMPTS="2"))
    await until(stack, lambda: "worker ready" in worker.log(), "the worker", timeout_s=120)
    await _shares(stack, [worker], "1.0")

    chat.throttle(seconds=10, retry_after_s=2)
    throttled_from = time.monotonic()
    produced = await _deliver(stack, INBOX, [f"t{n}" for n in range(12)])
    await until(stack, lambda: len(stack.mail.outbox) >= 12, "12 emails", timeout_s=90)

    refused = [at for at, status in chat.calls if status == 429]
    first = refused[0]
    # the calls already started when the first 429 came back, then one probe per pause
    later = [at for at in refused if at > first + 0.5]
    assert len(later) <= (throttled_from + 10 - first) / 2 + 1
    assert all(b - a >= 1.9 for a, b in itertools.pairwise(later))
    judged = verdict(stack, produced, INBOX)
    assert judged.passed and judged.count("answered") == len(produced), judged.violations
    assert dead_letters(stack) == []  # a 429 counted no attempt
    assert "model paused: it answered 429" in worker.log()
    assert _counter(worker.metrics(), 'onceonly_model_pauses_total{model="local-model"}') >= 2


async def test_one_tenants_flood_delays_anothers_message_by_about_one_call(
    stack_factory: Callable[..., Stack], chat: FakeChatModel
) -> None:
    window_s, latency_s = 1.0, 0.5
    stack = stack_factory(reorder_window_ms=int(window_s * 1000))
    chat.latency_s = latency_s
    worker = stack.worker(**openai_env(chat, ONCEONLY_WRITER_CONCURRENCY="8"))
    await until(stack, lambda: "worker ready" in worker.log(), "the worker", timeout_s=120)

    # A: 400 messages at once, 25 s of model time at 8 in flight; B: 5, once A's flood runs
    flood = asyncio.ensure_future(_deliver(stack, "a@agentmail.to", [f"a{n}" for n in range(400)]))
    await until(stack, lambda: len(stack.mail.outbox) >= 16, "A's first emails", timeout_s=60)
    await flood

    def a_emails() -> int:
        return sum(1 for e in stack.mail.outbox if e.inbox_id == "a@agentmail.to")

    def a_read() -> bool:
        """Every one of A's records taken by the worker (finished, or pending): B's then
        wait behind none of A's in the topic, and what B waits for is the model's slots.
        On a loaded machine the worker reads slower than the mail server answers."""
        found = re.search(r"^onceonly_pending_records (\S+)$", worker.metrics(), re.M)
        return found is not None and float(found.group(1)) + a_emails() >= 400

    await until(stack, a_read, "the worker reading all of A's records", timeout_s=60)
    b_sent = await _deliver(stack, "b@agentmail.to", [f"b{n}" for n in range(5)])
    a_before = a_emails()  # B is in the deliveries topic now

    def a_emails_before_b() -> list[int]:
        """For each of B's emails, A's emails before it in the order the mail server took
        them: not when this test's polling saw it, which a busy machine delays."""
        seen, before = 0, []
        for entry in list(stack.mail.outbox):
            if entry.inbox_id == "a@agentmail.to":
                seen += 1
            elif entry.replied_to_message_id in b_sent:
                before.append(seen)
        return before

    await until(stack, lambda: len(a_emails_before_b()) == 5, "B's 5 emails", timeout_s=60)
    seen = f"A's emails before each of B's: {a_emails_before_b()}, A's when B was in: {a_before}"
    assert 400 - max(a_emails_before_b()) > 100, seen  # B answered in the middle of A's flood
    # B waited about one call of A's, its wait counted in A's own emails, which a busy machine
    # slows as much as B's: the window, 2 calls and 3.5 s of slack at 8 calls in flight of
    # latency_s each (88 emails). B's releases from the window are timers, which lag on a
    # loaded machine while A's calls go on: at load 7, B's last email came 49 of A's emails
    # after B was in. Queued behind A's flood (one tenant for all), B waited 359.
    a_during_b = max(a_emails_before_b()) - a_before
    assert a_during_b <= (window_s + 2 * latency_s + 3.5) * 8 / latency_s, seen

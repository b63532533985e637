"""Odd records never stop a worker: each one is dead-lettered and the next is answered."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devstack.jars import kafka_classpath
from devstack.kafka_tools import CONFIGS, run_tool
from onceonly.ingest import normalise
from testkit import payloads
from tests.conftest import consume_all
from tests.integration.workers import INBOX, Stack, handled, until

pytestmark = pytest.mark.integration


def _envelope_of(payload: dict[str, object]) -> bytes:
    return normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC)).encode()


async def test_records_ingest_never_writes_are_dead_lettered_and_the_worker_goes_on(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    topic = stack.settings.deliveries_topic
    odd_message = payloads.agentmail_received(inbox_id=INBOX, thread_id="t-odd")
    odd_message["message"]["labels"] = 5  # type: ignore[index]
    naive = payloads.agentmail_received(inbox_id=INBOX, thread_id="t-naive")
    naive["message"]["timestamp"] = "2026-11-29T10:00:00"  # type: ignore[index]
    records = [
        b"null",
        b'{"v": 1, "occurred_at": 5}',
        b"[" * 50_000 + b"]" * 50_000,
        _envelope_of(odd_message),
    ]
    for n, value in enumerate(records):
        await stack.producer.produce(topic, value, key=f"odd-{n}".encode())

    await stack.deliver(stack.seed("<fine@example.com>", "t-fine"))
    await stack.until_sent(1)
    await until(
        stack,
        lambda: len(consume_all(stack.settings, stack.settings.dead_letter_topic)) >= 4,
        "4 dead letters",
    )
    await handled(stack)

    letters = [
        json.loads(r.value()) for r in consume_all(stack.settings, stack.settings.dead_letter_topic)
    ]
    assert sorted(letter["check"] for letter in letters) == [
        "not_an_envelope",
        "not_an_envelope",
        "not_an_envelope",
        "record_failed",
    ]
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<fine@example.com>"]
    stack.check_alive()


async def test_with_an_envelope_secret_a_record_without_its_mac_is_dead_lettered(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker(ONCEONLY_ENVELOPE_SECRET="the-shared-secret")
    topic = stack.settings.deliveries_topic
    signed = normalise.agentmail(
        json.dumps(stack.seed("<signed@example.com>", "t-signed")), {}, datetime.now(UTC)
    )
    forged = normalise.agentmail(
        json.dumps(stack.seed("<forged@example.com>", "t-forged")), {}, datetime.now(UTC)
    )
    value = signed.encode()
    await stack.producer.produce(
        topic, value, key=b"t-signed", headers=signed.headers(b"the-shared-secret", value)
    )
    await stack.producer.produce(topic, forged.encode(), key=b"t-forged", headers=forged.headers())

    await stack.until_sent(1)
    await until(
        stack,
        lambda: bool(consume_all(stack.settings, stack.settings.dead_letter_topic)),
        "the dead letter",
    )
    await handled(stack)

    [letter] = [
        json.loads(r.value()) for r in consume_all(stack.settings, stack.settings.dead_letter_topic)
    ]
    assert letter["check"] == "bad_mac"
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<signed@example.com>"]


async def test_a_hold_the_holds_changelog_refuses_is_answered_at_once_and_the_worker_goes_on(
    stack_factory: Callable[..., Stack], tmp_path: Path
) -> None:
    # an operator capped the holds changelog's records below ONCEONLY_RECORD_MAX_BYTES with
    # kafka-configs.sh: the broker refuses a large delivery's hold. The worker answers it at
    # once, not reordered; exiting, it would meet the same refusal at every restart
    stack = stack_factory(reorder_window_ms=2000)
    worker = stack.worker()
    await until(stack, lambda: "worker ready" in worker.log(), "the worker ready")
    altered = run_tool(
        CONFIGS,
        [
            "--bootstrap-server",
            stack.settings.kafka_bootstrap,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            f"{stack.settings.app_id}-holds-changelog",
            "--add-config",
            "max.message.bytes=8192",
        ],
        classpath=kafka_classpath(tmp_path / "tools"),  # Maven, from its local cache
        logs_dir=tmp_path / "tools-logs",
    )
    assert altered.returncode == 0, altered.stdout + altered.stderr

    large = stack.seed("<large@example.com>", "t-large", text="x" * 20_000)
    await stack.deliver(large)
    await stack.deliver(stack.seed("<small@example.com>", "t-small"))
    await stack.until_sent(2)
    # the refused hold's entry, left in the worker's store, released with its thread: a
    # duplicate of the delivery answered at once
    await until(stack, lambda: _skipped(worker.log(), str(large["event_id"])), "its release")

    replied = sorted(e.replied_to_message_id for e in stack.mail.outbox)
    assert replied == ["<large@example.com>", "<small@example.com>"]
    assert "the broker refused the delivery's hold" in worker.log()
    await handled(stack)


def _skipped(log: str, event_id: str) -> bool:
    return any("delivery skipped" in line and event_id in line for line in log.splitlines())

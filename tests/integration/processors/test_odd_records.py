"""Odd records never stop a worker: each one is dead-lettered and the next is answered."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

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

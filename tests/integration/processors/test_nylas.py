"""Nylas end to end: real broker, real worker processes, the Nylas v3 API on loopback.

Deliveries are produced as ingest makes them (``onceonly.ingest.normalise.nylas`` on a Nylas
notification); the workers run ``onceonly worker`` with ``NYLAS_API_KEY`` and
``ONCEONLY_NYLAS_API_URI`` pointing at ``testkit/fakes/nylas_server.py``, and reply
through the real ``nylas`` SDK.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from onceonly.foundation.kafka import AsyncProducer
from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from testkit import payloads
from testkit.fakes.nylas_server import FakeNylas
from tests.integration.workers import (
    Stack,
    handled,
    ledger_records,
    onceonly,
    until,
    worker_env,
    writer_calls,
    writer_env,
)

pytestmark = pytest.mark.integration

GRANT = "grant-onceonly-1"
AGENT = "support@acme.example"
CUSTOMER = "customer@example.com"
#: Nylas keeps an Idempotency-Key for 1 h; the restarted worker and the API move past it
PAST_THE_KEY_S = 3700


class NylasStack(Stack):
    """A :class:`Stack` whose workers answer Nylas notifications through the fake."""

    nylas: FakeNylas

    def __init__(
        self, settings: Settings, producer: AsyncProducer, nylas: FakeNylas, tmp: Path
    ) -> None:
        super().__init__(settings, producer, nylas, tmp)  # type: ignore[arg-type]
        self.nylas = nylas

    def env(self, data: Path, **extra: str) -> dict[str, str]:
        return worker_env(
            self.settings,
            mail_url="http://127.0.0.1:9",  # AgentMail is not used here
            data_dir=data,
            NYLAS_API_KEY="nyk_test",
            ONCEONLY_NYLAS_API_URI=self.nylas.base_url,
            **extra,
        )

    def notification(
        self,
        message_id: str,
        thread: str,
        *,
        event_type: str = "message.created",
        notification_id: str | None = None,
        seed: bool = True,
        **obj: Any,
    ) -> dict[str, Any]:
        """A Nylas notification for a message (seeded in the fake's grant first)."""
        if seed:
            self.nylas.seed_message(GRANT, message_id=message_id, thread_id=thread)
        stored = next(m for m in self.nylas.messages(GRANT) if m["id"] == message_id)
        stored.pop("headers", None)  # notifications carry no MIME headers
        payload = payloads.nylas_message(
            notification_id=notification_id or f"n-{uuid.uuid4().hex[:12]}",
            event_type=event_type,
            grant_id=GRANT,
            message_id=message_id,
            thread_id=thread,
        )
        payload["data"]["object"].update({**stored, **obj})
        return payload

    async def deliver(self, payload: dict[str, Any], times: int = 1) -> None:
        """What ingest would produce for this notification, ``times`` times at once."""

        async def once() -> None:
            envelope = normalise.nylas(json.dumps(payload), {}, datetime.now(UTC))
            await self.producer.produce(
                self.settings.deliveries_topic,
                envelope.encode(),
                key=envelope.thread_key.encode(),
                headers=envelope.headers(),
            )

        await asyncio.gather(*(once() for _ in range(times)))


@pytest.fixture
def nylas() -> Iterator[FakeNylas]:
    with FakeNylas().serving_in_thread() as fake:
        fake.seed_grant(GRANT, AGENT)
        yield fake


@pytest.fixture
def nylas_stack(nylas: FakeNylas, stack_of: Callable[..., NylasStack]) -> NylasStack:
    return stack_of(NylasStack, nylas)


async def test_a_notification_redelivered_three_times_some_at_once_gives_one_email(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    worker = stack.worker()
    payload = stack.notification("m1", "thread-1", notification_id="n-redelivered")

    await stack.deliver(payload, times=2)  # two deliveries at once
    await stack.until_sent(1)
    await stack.deliver(payload)  # and the third, later
    await until(stack, lambda: worker.log().count("delivery skipped") >= 2, "the 2 skips")
    await handled(stack)

    [email] = stack.nylas.outbox
    assert (email.reply_to_message_id, email.to) == ("m1", (CUSTOMER,))
    assert email.subject == "Re: Can you resend my invoice?"
    assert email.idempotency_key == reply_key(GRANT, "m1")
    record = ledger_records(stack)[reply_key(GRANT, "m1")]
    assert record.state is ReplyState.SENT and record.channel == "nylas"
    assert record.sent_message_id == email.sent_message_id


async def test_message_updated_for_an_answered_message_sends_nothing(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    worker = stack.worker()
    await stack.deliver(stack.notification("m1", "thread-u"))
    await stack.until_sent(1)

    updated = stack.notification("m1", "thread-u", event_type="message.updated", seed=False)
    await stack.deliver(updated)
    await until(stack, lambda: "reason=not_received" in worker.log(), "the skip")
    await handled(stack)

    assert len(stack.nylas.outbox) == 1
    assert 'onceonly_skips_total{reason="not_received"} 1.0' in worker.metrics()


async def test_the_agents_own_outbound_message_gets_no_reply(nylas_stack: NylasStack) -> None:
    stack = nylas_stack
    worker = stack.worker()  # the grant's address is read from the grant
    await stack.deliver(stack.notification("m1", "thread-o"))
    await stack.until_sent(1)
    sent = stack.nylas.outbox[0].sent_message_id

    # Nylas fires message.created for the agent's own reply too; the object names the
    # grant's address as sender (folders left out: the address alone must be enough)
    own = stack.notification(sent, "thread-o", seed=False, folders=[])
    sentinel = stack.notification("m2", "thread-s")
    await stack.deliver(own)
    await stack.deliver(sentinel)
    await stack.until_sent(2)
    await handled(stack)

    assert [e.reply_to_message_id for e in stack.nylas.outbox] == ["m1", "m2"]
    assert "reason=own_message" in worker.log()
    assert stack.nylas.request_counts["find_grant"] == 1


async def test_a_truncated_event_is_fetched_and_answered_once(nylas_stack: NylasStack) -> None:
    stack = nylas_stack
    stack.worker(ONCEONLY_REPLY_WRITER="tests.integration.writers:echo")
    body = "the whole body, which only the API has " + "x" * 2000
    stack.nylas.seed_message(GRANT, message_id="big", thread_id="thread-t", body=body)
    payload = stack.notification(
        "big", "thread-t", event_type="message.created.truncated", seed=False
    )
    payload["data"]["object"].pop("body")  # Nylas leaves bodies > 1 MB out
    payload["data"]["object"].pop("snippet")

    await stack.deliver(payload, times=2)
    await stack.until_sent(1)
    await handled(stack)

    [email] = stack.nylas.outbox
    assert email.body == f"big: {body}"
    assert stack.nylas.request_counts["find_message"] >= 1


async def test_two_messages_of_one_thread_get_one_reply_to_the_latest(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    stack.worker()
    now = datetime.now(UTC).timestamp()
    for message_id, age_s in (("q1", 60), ("q2", 30)):
        stack.nylas.seed_message(
            GRANT, message_id=message_id, thread_id="thread-b", date=now - age_s
        )
    first = stack.notification("q1", "thread-b", seed=False)
    second = stack.notification("q2", "thread-b", seed=False)

    await stack.deliver(second)
    await stack.deliver(first)
    await stack.until_sent(1)
    await handled(stack)

    [email] = stack.nylas.outbox
    assert email.reply_to_message_id == "q2"
    assert "your 2 messages" in (email.body or "")
    assert ledger_records(stack)[reply_key(GRANT, "q1")].state is ReplyState.COVERED


async def test_a_kill_between_send_and_record_restarted_past_the_key_lifetime_sends_nothing(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    env = writer_env(stack)
    worker = stack.worker("w1", **env)
    key = reply_key(GRANT, "m1")
    stack.nylas.faults.answer_delay_s = 8.0  # the email is out, the answer is not

    await stack.deliver(stack.notification("m1", "thread-k"))
    await stack.until_sent(1)
    worker.kill()
    assert ledger_records(stack)[key].state is ReplyState.PENDING

    # an hour and more later: Nylas has forgotten the key, the worker's clock agrees
    stack.nylas.faults.answer_delay_s = 0.0
    stack.nylas.advance_clock(PAST_THE_KEY_S)
    later = stack.worker(
        "w-later", state_of="w1", ONCEONLY_CLOCK_OFFSET_S=str(PAST_THE_KEY_S), **env
    )
    await until(
        stack, lambda: ledger_records(stack)[key].state is ReplyState.SENT, "the reconciled record"
    )

    [email] = stack.nylas.outbox
    assert ledger_records(stack)[key].sent_message_id == email.sent_message_id
    assert stack.nylas.send_keys == [key]  # no second send was even tried
    assert "reply found in the thread" in later.log()
    assert len(writer_calls(stack)) == 1


async def test_catch_up_answers_what_the_grant_received_while_webhooks_were_down(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    stack.worker()
    await stack.deliver(stack.notification("answered", "thread-c1"))
    await stack.until_sent(1)  # the fake files the agent's reply in the grant as well
    stack.nylas.seed_message(GRANT, message_id="missed1", thread_id="thread-c2")
    stack.nylas.seed_message(GRANT, message_id="missed2", thread_id="thread-c3")

    def catch_up(*args: str) -> subprocess.CompletedProcess[str]:
        return onceonly(stack, "catch-up", "--nylas-grant", GRANT, *args)

    first = catch_up("--since", "2000-01-01T00:00:00")
    second = catch_up()  # from the last recorded reply: nothing new to answer

    assert first.returncode == 0, first.stderr + first.stdout
    assert "found 4, answered 2, skipped 2 (1 sent by the agent, 1 already answered)" in (
        first.stdout
    )
    assert second.returncode == 0, second.stderr + second.stdout
    await handled(stack)
    answered = sorted(e.reply_to_message_id or "" for e in stack.nylas.outbox)
    assert answered == ["answered", "missed1", "missed2"]

"""The worker end to end: real broker, real worker processes, AgentMail's API on loopback."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka.partitioner import DefaultPartitioner

from onceonly.ingest import normalise
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from tests._mail import seed_agents_message
from tests.conftest import consume_all
from tests.integration.workers import (
    INBOX,
    Stack,
    handled,
    restart_mid_send,
)
from tests.integration.workers import (
    ledger_records as _ledger,
)
from tests.integration.workers import (
    until as _until,
)
from tests.integration.workers import (
    writer_calls as _writer_calls,
)
from tests.integration.workers import (
    writer_env as _writer_env,
)

pytestmark = pytest.mark.integration


async def test_one_message_delivered_five_times_gives_one_email(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    stack.worker()
    payload = stack.seed("<m1@example.com>", "thr-a", event_id="evt-a")

    await stack.deliver(payload, times=3)  # three at once
    await stack.until_sent(1)
    await stack.deliver(payload, times=2)  # and two later
    await handled(stack)

    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<m1@example.com>"]


async def test_a_kill_between_the_ledger_write_and_the_send_sends_once_with_the_same_text(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    env = _writer_env(stack)
    worker = stack.worker(**env)
    payload = stack.seed("<m1@example.com>", "thr-k1")
    key = reply_key(INBOX, "<m1@example.com>")
    stack.mail.faults.send_delay_s = 4.0  # the send is in flight when the worker dies

    await stack.deliver(payload)
    await _until(stack, lambda: key in _ledger(stack), "the pending ledger record")
    pending = restart_mid_send(stack, worker, key)
    await _until(stack, lambda: _ledger(stack)[key].state is ReplyState.SENT, "the sent record")

    assert [e.text for e in stack.mail.outbox] == [pending.reply_text]
    assert len(_writer_calls(stack)) == 1


async def test_a_kill_between_the_send_and_the_sent_record_sends_nothing_more(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    worker = stack.worker(**_writer_env(stack))
    payload = stack.seed("<m1@example.com>", "thr-k2")
    key = reply_key(INBOX, "<m1@example.com>")
    stack.mail.faults.answer_delay_s = 8.0  # the email is out, the answer is not

    await stack.deliver(payload)
    await stack.until_sent(1)
    worker.kill()
    assert _ledger(stack)[key].state is ReplyState.PENDING

    stack.mail.faults.answer_delay_s = 0.0
    worker.start()
    await _until(stack, lambda: _ledger(stack)[key].state is ReplyState.SENT, "the sent record")

    assert len(stack.mail.outbox) == 1
    assert len(_writer_calls(stack)) == 1


async def test_kills_mid_stream_leave_the_ledger_topic_saying_sent_for_every_email(
    stack_factory: Callable[..., Stack],
) -> None:
    # the topic, which catch-up and any other worker read, not only the killed store. A
    # long producer linger holds each write in the worker for 200 ms, so kills land there
    stack = stack_factory()
    worker = stack.worker(ONCEONLY_PRODUCE_LINGER_MS="200")
    count = 400
    messages = [f"<s{i}@example.com>" for i in range(count)]
    await asyncio.gather(
        *(stack.deliver(stack.seed(m, f"thr-s{i}")) for i, m in enumerate(messages))
    )

    for sent in (100, 250):  # SIGKILL while replies are going out, then start it again
        await stack.until_sent(sent)
        worker.kill()
        worker.start()
    await stack.until_sent(count, timeout_s=180)

    def states() -> Counter[str]:
        return Counter(r.state.value for r in _ledger(stack).values())

    await _until(stack, lambda: states()["sent"] >= count, "every reply recorded sent", 60)
    assert states() == Counter({"sent": count})
    assert sorted(e.replied_to_message_id for e in stack.mail.outbox) == sorted(messages)


async def test_a_burst_of_three_in_one_thread_gets_one_reply_to_the_latest(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=1500)
    stack.worker()
    times = ["2026-11-29T10:00:02Z", "2026-11-29T10:00:00Z", "2026-11-29T10:00:01Z"]
    for i, ts in enumerate(times):
        await stack.deliver(stack.seed(f"<b{i}@example.com>", "thr-burst", timestamp=ts))

    await stack.until_sent(1)
    await handled(stack)

    [email] = stack.mail.outbox
    assert email.replied_to_message_id == "<b0@example.com>"  # the latest by payload time
    assert "your 3 messages" in (email.text or "")
    ledger = _ledger(stack)
    assert ledger[reply_key(INBOX, "<b1@example.com>")].state is ReplyState.COVERED


async def test_a_late_event_is_processed_and_counted(stack_factory: Callable[..., Stack]) -> None:
    stack = stack_factory(reorder_window_ms=500)
    worker = stack.worker()
    await stack.deliver(
        stack.seed("<new@example.com>", "thr-late", timestamp="2026-11-29T10:00:09Z")
    )
    await stack.until_sent(1)

    await stack.deliver(
        stack.seed("<old@example.com>", "thr-late", timestamp="2026-11-29T10:00:01Z")
    )
    await stack.until_sent(2)

    assert "onceonly_late_events_total 1.0" in worker.metrics()
    assert "late event" in worker.log()


async def test_the_agents_own_message_gets_no_reply(stack_factory: Callable[..., Stack]) -> None:
    stack = stack_factory()
    stack.worker()
    own = stack.seed("<own@example.com>", "thr-own", sender=f"Support <{INBOX}>")
    sentinel = stack.seed("<other@example.com>", "thr-other")

    await stack.deliver(own)
    await stack.deliver(sentinel)
    await stack.until_sent(1)
    await handled(stack)

    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<other@example.com>"]


async def test_a_lost_response_does_not_become_a_second_email(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    stack.worker()
    key = reply_key(INBOX, "<m1@example.com>")
    stack.mail.lose_response_next(1)

    await stack.deliver(stack.seed("<m1@example.com>", "thr-lost"))
    await _until(
        stack,
        lambda: key in _ledger(stack) and _ledger(stack)[key].state is ReplyState.SENT,
        "sent",
    )

    assert len(stack.mail.outbox) == 1


async def test_a_stale_pending_record_whose_reply_is_in_the_thread_sends_nothing(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    payload = stack.seed("<m1@example.com>", "thr-stale")
    seed_agents_message(stack.mail, INBOX, "<r1@example.com>", "thr-stale", "<m1@example.com>")
    key = reply_key(INBOX, "<m1@example.com>")
    stale = ReplyRecord(
        key,
        INBOX,
        "<m1@example.com>",
        "agentmail:thr-stale",
        ReplyState.PENDING,
        datetime.now(UTC) - timedelta(hours=25),
        "the old text",
    )
    every = list(range(stack.settings.partitions))
    partition = DefaultPartitioner()(b"agentmail:thr-stale", every, every)
    await stack.producer.produce(
        stack.settings.ledger_topic, stale.encode(), key=key.encode(), partition=partition
    )
    stack.worker()

    await stack.deliver(payload)
    await _until(
        stack, lambda: _ledger(stack)[key].state is ReplyState.SENT, "the reconciled record"
    )

    assert stack.mail.outbox == []
    assert _ledger(stack)[key].sent_message_id == "<r1@example.com>"


async def test_two_workers_one_killed_mid_run_answer_every_message_once(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=4, reorder_window_ms=200)
    stack.worker("w1")
    stack.worker("w2")
    messages = [(f"<s{i}@example.com>", f"thr-s{i}") for i in range(30)]

    for message_id, thread in messages[:15]:
        await stack.deliver(stack.seed(message_id, thread))
    await stack.until_sent(5)
    stack.workers[0].kill()
    for message_id, thread in messages[15:]:
        await stack.deliver(stack.seed(message_id, thread))
    # a kill costs a session timeout (10 s) and a rebalance; generous under load
    await stack.until_answered([m for m, _ in messages], timeout_s=240)
    await handled(stack)

    answered = sorted(e.replied_to_message_id for e in stack.mail.outbox)
    assert answered == sorted(m for m, _ in messages)


async def test_dedupe_entries_expire_in_the_store_and_the_changelog(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    worker = stack.worker()
    first = stack.seed("<e1@example.com>", "thr-exp", event_id="evt-exp-1")
    await stack.deliver(first)
    await stack.until_sent(1)
    worker.stop()

    eight_days = str(8 * 24 * 3600)
    later = stack.worker(
        "w-later", state_of="w1", ONCEONLY_CLOCK_OFFSET_S=eight_days, ONCEONLY_DEDUPE_SWEEP_S="1"
    )
    # records on the thread's partition, a sweep interval apart, run the sweep
    await stack.deliver(stack.seed("<e2@example.com>", "thr-exp", event_id="evt-exp-2"))
    await stack.until_sent(2)
    await asyncio.sleep(1.5)
    await stack.deliver(stack.seed("<e3@example.com>", "thr-exp", event_id="evt-exp-3"))
    await stack.until_sent(3)
    await _until(stack, lambda: "dedupe entries expired" in later.log(), "the sweep")

    changelog = consume_all(stack.settings, f"{stack.settings.app_id}-events-changelog")
    tombstones = [r.key() for r in changelog if r.value() is None]
    assert b"agentmail:evt-exp-1" in tombstones

    await stack.deliver(first)  # dedupe forgot it; the reply ledger still remembers
    await _until(stack, lambda: "reply skipped: already handled" in later.log(), "the ledger skip")
    assert len(stack.mail.outbox) == 3


async def test_a_stripe_event_reaches_the_handler_and_its_effect_happens_once(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    effect_log = stack.tmp / "effects.log"
    worker = stack.worker(
        ONCEONLY_EVENT_HANDLER="tests.integration.writers:count_receipts",
        ONCEONLY_TEST_EFFECT_LOG=str(effect_log),
    )
    body = json.dumps(payloads.stripe_event(event_id="evt_paid_1"))
    envelope = normalise.stripe(body, {}, datetime.now(UTC))

    for _ in range(3):
        await stack.producer.produce(
            stack.settings.deliveries_topic, envelope.encode(), key=envelope.thread_key.encode()
        )
    await _until(stack, effect_log.exists, "the effect")
    await _until(stack, lambda: worker.log().count("delivery skipped") >= 2, "the duplicates")

    assert len(effect_log.read_text().splitlines()) == 1


async def test_events_out_of_order_within_the_window_reach_the_writer_in_time_order(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=1500)
    stack.worker(ONCEONLY_REPLY_WRITER="tests.integration.writers:echo")
    arrivals = [("<c@x>", "10:00:03"), ("<a@x>", "10:00:01"), ("<b@x>", "10:00:02")]

    for message_id, clock in arrivals:
        payload = stack.seed(message_id, "thr-order", timestamp=f"2026-11-29T{clock}Z")
        await stack.deliver(payload)
    await stack.until_sent(1)

    [email] = stack.mail.outbox
    order = [part.split(":")[0] for part in (email.text or "").split(" | ")]
    assert order == ["<a@x>", "<b@x>", "<c@x>"]


async def test_an_event_without_its_body_is_fetched_before_the_writer_sees_it(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker(ONCEONLY_REPLY_WRITER="tests.integration.writers:echo")
    stack.mail.seed_message(
        INBOX, message_id="<big@x>", thread_id="thr-big", text="the full body from the API"
    )
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-big", message_id="<big@x>", text=None
    )

    await stack.deliver(payload)
    await stack.until_sent(1)

    assert stack.mail.outbox[0].text == "<big@x>: the full body from the API"

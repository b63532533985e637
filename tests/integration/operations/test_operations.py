"""Operations on a live stack: replay, dead letters. Real broker, workers and CLI."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import (
    INBOX,
    Stack,
    ledger_records,
    onceonly,
    state_of,
    until,
)

pytestmark = pytest.mark.integration


async def _answer_all(stack: Stack, count: int) -> None:
    for i in range(count):
        await stack.deliver(stack.seed(f"<r{i}@example.com>", f"thr-r{i}"))
    await stack.until_sent(count)


async def test_replay_from_offset_zero_after_everything_was_answered_sends_nothing(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=200)
    worker = stack.worker()
    await _answer_all(stack, 6)

    done = onceonly(stack, "replay", "--from-offset", "0")
    assert done.returncode == 0, done.stderr
    await until(stack, lambda: worker.log().count("delivery skipped") >= 6, "the replayed skips")
    await asyncio.sleep(2)

    assert len(stack.mail.outbox) == 6
    assert "replayed 6 records" in done.stdout


async def test_replay_dry_run_shows_the_plan_and_replays_nothing(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=200)
    stack.worker()
    await _answer_all(stack, 3)

    done = onceonly(stack, "replay", "--from-offset", "0", "--dry-run")

    assert done.returncode == 0, done.stderr
    assert "dry run: nothing replayed" in done.stdout
    assert "partition" in done.stdout and "count" in done.stdout


async def test_a_dead_lettered_failure_is_answered_exactly_once_by_replay(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=200, send_attempts=2)
    stack.worker()
    await _answer_all(stack, 2)
    key = reply_key(INBOX, "<down@example.com>")
    stack.mail.fail_next(1000, status=503)  # the mail API is down

    await stack.deliver(stack.seed("<down@example.com>", "thr-down"))
    await until(
        stack,
        lambda: state_of(stack, key) is ReplyState.FAILED,
        "the failed record",
    )
    listed = onceonly(stack, "dead-letters", "list")
    assert "1 dead letter(s)" in listed.stdout, listed.stdout + listed.stderr

    stack.mail.faults.fail_remaining = 0  # and up again
    done = onceonly(stack, "replay", "--from-offset", "0")
    assert done.returncode == 0, done.stderr
    await until(stack, lambda: ledger_records(stack)[key].state is ReplyState.SENT, "the retry")
    await asyncio.sleep(2)

    answered = sorted(e.replied_to_message_id for e in stack.mail.outbox)
    assert answered == ["<down@example.com>", "<r0@example.com>", "<r1@example.com>"]


async def test_dead_letters_retry_sends_the_failed_reply_once(dead_letter_stack: Stack) -> None:
    stack = dead_letter_stack

    done = onceonly(stack, "dead-letters", "retry")
    assert done.returncode == 0, done.stderr
    await stack.until_sent(1)
    again = onceonly(stack, "dead-letters", "retry")
    assert again.returncode == 0
    listed = onceonly(stack, "dead-letters", "list")
    await asyncio.sleep(3)

    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<dl@example.com>"]
    assert "from 0 dead letter(s)" in again.stdout  # retry of all: only the open ones
    assert "retried" in listed.stdout and "0 open" in listed.stdout


def test_replay_refuses_a_partition_that_does_not_exist(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=2)

    done = onceonly(stack, "replay", "--from-offset", "0", "--partition", "5")

    assert done.returncode != 0
    assert "has partitions 0..1, not 5" in done.stderr


async def test_lag_is_shown_per_partition_and_drains_to_zero(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=2, reorder_window_ms=0)
    for i in range(4):
        await stack.deliver(stack.seed(f"<l{i}@example.com>", f"thr-l{i}"))

    before = onceonly(stack, "lag")
    assert before.returncode == 0, before.stderr
    assert "│ all" in before.stdout and "│ 4 " in before.stdout.replace("│ 4│", "│ 4 │")

    worker = stack.worker()
    await stack.until_sent(4)
    await until(
        stack,
        lambda: (
            'onceonly_consumer_lag{partition="0"' in worker.metrics()
            and all(
                line.endswith(" 0.0")
                for line in worker.metrics().splitlines()
                if line.startswith("onceonly_consumer_lag{")
            )
        ),
        "the lag gauge to drain",
    )


async def test_a_disabled_webhook_sets_the_gauge_to_zero_and_logs_loudly(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.mail.seed_webhook("wh_1", enabled=True)
    worker = stack.worker(ONCEONLY_AGENTMAIL_WEBHOOK_ID="wh_1", ONCEONLY_WEBHOOK_POLL_S="0.5")
    await until(stack, lambda: "onceonly_webhook_enabled 1.0" in worker.metrics(), "enabled=1")

    stack.mail.set_webhook_enabled("wh_1", False)

    await until(stack, lambda: "onceonly_webhook_enabled 0.0" in worker.metrics(), "enabled=0")
    assert "AGENTMAIL WEBHOOK IS DISABLED" in worker.log()


async def test_catch_up_answers_exactly_the_unanswered_messages(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    await stack.deliver(stack.seed("<answered@example.com>", "thr-c1"))
    await stack.until_sent(1)  # the fake also files the agent's reply as a sent message
    for message_id, thread in [
        ("<missed1@example.com>", "thr-c2"),
        ("<missed2@example.com>", "thr-c3"),
    ]:
        stack.mail.seed_message(INBOX, message_id=message_id, thread_id=thread)
    stack.mail.seed_message(
        INBOX, message_id="<agent@example.com>", thread_id="thr-c4", labels=("sent",), from_=INBOX
    )

    done = onceonly(stack, "catch-up", "--inbox", INBOX, "--since", "2000-01-01T00:00:00")

    assert done.returncode == 0, done.stderr + done.stdout
    answered = sorted(e.replied_to_message_id for e in stack.mail.outbox)
    assert answered == ["<answered@example.com>", "<missed1@example.com>", "<missed2@example.com>"]
    assert "found 5, answered 2, skipped 3 (2 sent by the agent, 1 already answered)" in done.stdout


async def test_a_second_catch_up_sends_nothing(stack_factory: Callable[..., Stack]) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    stack.mail.seed_message(INBOX, message_id="<late@example.com>", thread_id="thr-c5")

    first = onceonly(stack, "catch-up", "--inbox", INBOX, "--since", "2000-01-01")
    second = onceonly(stack, "catch-up", "--inbox", INBOX)  # starts at the last reply

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    await asyncio.sleep(2)
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<late@example.com>"]


async def test_two_then_three_workers_share_eight_partitions_through_a_kill_and_restart(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=8, reorder_window_ms=200)
    stack.worker("w1", ONCEONLY_WORKER_ID="w1")
    stack.worker("w2", ONCEONLY_WORKER_ID="w2")
    messages = [(f"<p{i}@example.com>", f"thr-p{i}") for i in range(60)]

    for message_id, thread in messages[:20]:
        await stack.deliver(stack.seed(message_id, thread))
    await stack.until_sent(10)
    stack.worker("w3", ONCEONLY_WORKER_ID="w3")  # scale out mid-stream
    for message_id, thread in messages[20:40]:
        await stack.deliver(stack.seed(message_id, thread))
    await stack.until_sent(25)
    stack.workers[1].kill()  # a crash mid-stream...
    for message_id, thread in messages[40:]:
        await stack.deliver(stack.seed(message_id, thread))
    stack.workers[1].start()  # ...and the same worker back, with its state
    await stack.until_answered([m for m, _ in messages], timeout_s=240)
    await asyncio.sleep(3)

    answered = sorted(e.replied_to_message_id for e in stack.mail.outbox)
    assert answered == sorted(m for m, _ in messages)
    # every worker had a share of the deliveries topic: each joined with some of its
    # partitions (whether each also sent a reply is up to timing: on a loaded machine the
    # others can answer everything before the third's first assignment comes)
    share = re.compile(
        rf"joined the consumer group .*'{re.escape(stack.settings.deliveries_topic)}': [1-8]\b"
    )
    assert all(share.search(w.log()) for w in stack.workers), stack.logs()

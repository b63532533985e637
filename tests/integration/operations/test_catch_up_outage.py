"""Catch-up after an outage, as an operator runs it: ``onceonly catch-up --inbox I`` with its
default start, after mail that came once the webhook was back has been answered.

Real broker, a real worker, the command as a process, the AgentMail fake as the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from testkit import payloads
from tests.integration.workers import INBOX, Stack, handled, onceonly

pytestmark = pytest.mark.integration

HOUR = 3600.0


def lost(stack: Stack, message_id: str, thread: str, hours_ago: float) -> None:
    """A message the inbox received while webhooks were down: no delivery ever came."""
    at = stack.mail.now() - hours_ago * HOUR
    stack.mail.seed_message(INBOX, message_id=message_id, thread_id=thread, timestamp=at)


async def delivered(stack: Stack, message_id: str, thread: str, hours_ago: float) -> None:
    """A message whose webhook came, with the message's own time."""
    at = stack.mail.now() - hours_ago * HOUR
    message: dict[str, Any] = stack.mail.seed_message(
        INBOX, message_id=message_id, thread_id=thread, timestamp=at
    )
    await stack.deliver(
        payloads.agentmail_received(
            inbox_id=INBOX, thread_id=thread, message_id=message_id, timestamp=message["timestamp"]
        )
    )


def caught_up(stack: Stack) -> str:
    """``onceonly catch-up`` of the inbox, as an operator runs it (it succeeds): its output."""
    done = onceonly(stack, "catch-up", "--inbox", INBOX)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def replied_to(stack: Stack) -> list[str]:
    return sorted(e.replied_to_message_id or "" for e in stack.mail.outbox)


async def test_catch_up_answers_what_the_outage_lost_though_newer_mail_was_answered(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    lost(stack, "<lost1@example.com>", "thr-o1", hours_ago=30)  # webhooks down...
    lost(stack, "<lost2@example.com>", "thr-o2", hours_ago=29)
    await delivered(stack, "<after@example.com>", "thr-o3", hours_ago=0.1)  # ...and back
    await stack.until_sent(1)

    done = caught_up(stack)

    assert replied_to(stack) == [f"<{m}@example.com>" for m in ("after", "lost1", "lost2")]
    assert "found 4, answered 2, skipped 2 (1 sent by the agent, 1 already answered)" in done
    assert f"listed {INBOX} from " in done and "7 days back;" in done
    await handled(stack)
    assert len(stack.mail.outbox) == 3  # each once


async def test_an_outage_longer_than_the_look_back_is_listed_from_its_beginning(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    await delivered(stack, "<before@example.com>", "thr-l1", hours_ago=10 * 24)
    await stack.until_sent(1)
    lost(stack, "<lost@example.com>", "thr-l2", hours_ago=9 * 24)  # ten days without webhooks
    await delivered(stack, "<after@example.com>", "thr-l3", hours_ago=0.1)
    await stack.until_sent(2)

    done = caught_up(stack)

    assert replied_to(stack) == [f"<{m}@example.com>" for m in ("after", "before", "lost")]
    assert "answered 1," in done
    assert "last message the ledger recorded before 7 days back" in done


def test_a_catch_up_of_an_inbox_the_ledger_never_saw_asks_where_to_start(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    stack.mail.seed_message(INBOX, message_id="<m@example.com>", thread_id="thr-n1")

    done = onceonly(stack, "catch-up", "--inbox", INBOX)

    assert done.returncode == 1
    assert "records no message of" in done.stderr and "--since" in done.stderr

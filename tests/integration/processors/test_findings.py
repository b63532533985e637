"""The simulator's findings F26 and F27 made real: real worker processes, the real broker,
the local AgentMail server and the ``onceonly`` commands as an operator runs them.

F26: a message that reaches the worker in two deliveries with two event ids (its webhook,
and a catch-up's record fed while its reply was being written) is answered once, by a
writer that saw it once, though another writer's reply that came first answers it (a
late writer's, which the test lands in the ledger topic as that writer would).

F37: a dead letter's retry that meets a claim left *in progress* by a record the worker
committed before (the claim's outcome lost) answers the message.

F27: a dead letter's retry that reaches the worker while another delivery of its event is
held (the router's hold), or is being processed (``Conversation.claim``), is dead-lettered
again (``retry_raced``), not skipped with its letter closed, so a later retry answers the
message.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.decision import DecisionRecord, Stage
from onceonly.schemas.ledger import EventEntry, EventState, ReplyRecord, ReplyState
from testkit import payloads
from tests.conftest import consume_all
from tests.integration.holds import held_changes
from tests.integration.workers import (
    INBOX,
    Stack,
    dead_letters,
    ledger_records,
    model_calls,
    model_env,
    onceonly,
    sent_to,
    state_of,
    until,
    verdict,
)

pytestmark = pytest.mark.integration

THREAD = "t-findings"
#: the text of another writer's reply that came first
THEIRS = "the first writer's text"


def _seed(stack: Stack, message_id: str, timestamp: str) -> dict[str, Any]:
    """A received message on the mail server (catch-up lists it) and its webhook."""
    stack.mail.seed_message(INBOX, message_id=message_id, thread_id=THREAD, timestamp=timestamp)
    return payloads.agentmail_received(
        inbox_id=INBOX, thread_id=THREAD, message_id=message_id, timestamp=timestamp
    )


def _gated(stack: Stack) -> dict[str, str]:
    """A worker's model writer whose calls wait at the test's gate, then take a second."""
    gate = str(stack.tmp / "writer.gate")
    return model_env(stack, ONCEONLY_TEST_WRITER_GATE=gate, ONCEONLY_TEST_WRITER_DELAY_S="1")


def _let_through(stack: Stack, calls: int) -> None:
    """Let the writer's first ``calls`` calls end (tests.integration.writers' gate)."""
    (stack.tmp / "writer.gate").write_text(str(calls))


async def _theirs_first(stack: Stack, message_id: str, covers: tuple[str, ...]) -> ReplyRecord:
    """Another writer's pending reply to ``message_id``, whose writer saw the messages of
    ``covers`` too, landed in the ledger before this worker's own record (a worker past its
    fence check, waking): the worker's arbitration sends it instead of its own."""
    theirs = ReplyRecord(
        reply_key(INBOX, message_id),
        INBOX,
        message_id,
        f"agentmail:{THREAD}",
        ReplyState.PENDING,
        datetime.now(UTC),
        THEIRS,
        covers=tuple(reply_key(INBOX, m) for m in covers),
    )
    ledger = stack.settings.ledger_topic
    await stack.producer.produce(ledger, theirs.encode(), key=theirs.key.encode(), partition=0)
    return theirs


def _holds(stack: Stack) -> list[list[str]]:
    """The event ids the thread held, change by change (its entries in the holds changelog,
    which a worker flushes as it commits, not at once): waiting for their window, or
    released and being processed."""
    return held_changes(stack.settings, f"agentmail:{THREAD}")


def _settled(stack: Stack, changes: int = 2) -> bool:
    """Whether the buffer changed at least ``changes`` times and is empty again: every
    delivery it held was processed (taken off only then)."""
    holds = _holds(stack)
    return len(holds) >= changes and not holds[-1]


def _decided(stack: Stack, event_id: str, stage: Stage, reason: str, replay: bool) -> bool:
    """Whether the worker let a delivery of ``event_id`` go at ``stage`` for ``reason``."""
    records = consume_all(stack.settings, stack.settings.decisions_topic)
    return any(
        (d.event_id, d.stage, d.reason, d.replay) == (event_id, stage, reason, replay)
        for d in map(DecisionRecord.decode, (r.value() for r in records))
    )


async def _let_go(
    stack: Stack, event_id: str, stage: Stage, reason: str, *, replay: bool, what: str
) -> None:
    """Until the worker let a delivery of ``event_id`` go at ``stage`` for ``reason``."""
    await until(stack, lambda: _decided(stack, event_id, stage, reason, replay), what)


def _open_letters(stack: Stack) -> list[dict[str, Any]]:
    """The dead letters no retry note names (``onceonly dead-letters retry`` sends these)."""
    topic = stack.settings.dead_letter_topic
    records = [(int(r.offset()), json.loads(r.value())) for r in consume_all(stack.settings, topic)]
    closed = {int(n) for _, v in records if v.get("kind") == "retried" for n in v["letters"]}
    return [v for n, v in records if v.get("kind") != "retried" and n not in closed]


def _letters(stack: Stack, check: str) -> list[list[str]]:
    """The event ids of each open letter of ``check``."""
    letters = [x for x in _open_letters(stack) if x.get("check") == check]
    return [[e["event_id"] for e in x["envelopes"]] for x in letters]


def _retry(stack: Stack) -> None:
    """``onceonly dead-letters retry``: every open letter sent again, and closed."""
    done = onceonly(stack, "dead-letters", "retry")
    assert done.returncode == 0, done.stderr + done.stdout


# -- F26 -------------------------------------------------------------------------------
A, B = "<f26-a@example.com>", "<f26-b@example.com>"


def _catch_up(stack: Stack) -> None:
    """``onceonly catch-up`` of the inbox, not waiting for the answers: the ledger has
    nothing for A and B yet, so both are fed again under event ids of its own."""
    done = onceonly(stack, "catch-up", "--inbox", INBOX, "--since", "2026-11-29", "--wait-s", "0")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "found 2, answered 0" in done.stdout and "pending 2" in done.stdout


@pytest.mark.parametrize("written", [True, False], ids=["while-written", "before-release"])
async def test_a_message_fed_again_by_a_catch_up_is_answered_once_by_a_writer_that_saw_it_once(
    stack_factory: Callable[..., Stack], written: bool
) -> None:
    # A and B's webhooks come in one burst, and the operator's catch-up feeds both again:
    # while the burst's writer runs (held at the gate), the reply's look for newer messages
    # of the thread finds the copies; before the burst is released, they are in it. Another
    # writer's reply to B, which saw A, lands first. Taken as messages of their own, the
    # writer saw A and B twice, and B's copy, which the other reply does not cover, was
    # answered anew: a second email, keys ignored by the mail server
    stack = stack_factory(partitions=1)  # a reorder window of 1 s: A and B are one burst
    stack.mail.ignore_keys()
    await stack.deliver(_seed(stack, A, "2026-11-29T10:00:00.000Z"))
    await stack.deliver(_seed(stack, B, "2026-11-29T10:01:00.000Z"))
    if not written:
        _catch_up(stack)
    stack.worker(**_gated(stack))
    await until(stack, lambda: bool(model_calls(stack)), "the writer's call")
    if written:
        _catch_up(stack)
    theirs = await _theirs_first(stack, B, covers=(A,))
    _let_through(stack, 1_000)  # every call ends, a second after it begins

    await until(stack, lambda: _settled(stack, 5), "the burst and the copies processed")
    sizes = [len(held) for held in _holds(stack)]
    assert sizes[sizes.index(4) :] == [4, 3, 2, 1, 0]  # all four held, then let go at once
    assert [(e.replied_to_message_id, e.text) for e in stack.mail.outbox] == [(B, THEIRS)]
    assert [call["ids"] for call in model_calls(stack)] == [[A, B]]  # each seen once
    assert ledger_records(stack)[reply_key(INBOX, A)].covered_by == theirs.key
    assert state_of(stack, theirs.key) is ReplyState.SENT
    judged = verdict(stack, [A, B])
    assert judged.passed, judged.violations


# -- F27: the router's hold --------------------------------------------------------------
M = "<f27@example.com>"
#: long enough for ``onceonly dead-letters retry`` to run while a delivery is held
WINDOW_MS = 10_000


async def _retry_meets_held_redelivery(stack: Stack) -> str:
    """M's reply is dead-lettered (the mail API down), its webhook comes again (the same
    event id: the provider's retry) and is held; the operator's retry of the letter
    reaches the worker meanwhile. Returns once the held copy was let go; the event id."""
    payload = _seed(stack, M, "2026-11-29T10:00:00.000Z")
    event_id = str(payload["event_id"])
    stack.mail.fail_next(1000, status=500)
    await stack.deliver(payload)
    key = reply_key(INBOX, M)
    await until(stack, lambda: state_of(stack, key) is ReplyState.FAILED, "the failed record")
    await until(stack, lambda: _settled(stack), "the failed delivery processed")
    stack.mail.faults.fail_remaining = 0  # the mail API is up again

    await stack.deliver(payload)
    await until(stack, lambda: _holds(stack)[-1] == [event_id], "the second delivery held")
    _retry(stack)
    held, failed = "the retry let go: its event held", "the held delivery let go: it failed"
    await _let_go(stack, event_id, Stage.HOLD, "duplicate", replay=True, what=held)
    await _let_go(stack, event_id, Stage.DEDUPE, "failed", replay=False, what=failed)
    return event_id


async def test_a_retry_that_meets_its_event_held_is_dead_lettered_again_and_retried_later(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=1, reorder_window_ms=WINDOW_MS, send_attempts=1)
    stack.worker()
    event_id = await _retry_meets_held_redelivery(stack)

    assert _letters(stack, "retry_raced") == [[event_id]]
    assert stack.mail.outbox == []

    changes = len(_holds(stack))
    _retry(stack)
    await stack.until_sent(1)
    await until(stack, lambda: _settled(stack, changes + 2), "the retry processed")
    assert sent_to(stack) == Counter({M: 1})
    assert state_of(stack, reply_key(INBOX, M)) is ReplyState.SENT
    assert _open_letters(stack) == [] and len(dead_letters(stack)) == 4  # 2 letters, 2 notes
    judged = verdict(stack, [M])
    assert judged.passed, judged.violations


# -- F27: the claim ----------------------------------------------------------------------
C, D = "<f27-c@example.com>", "<f27-d@example.com>"


async def _retry_meets_running_burst(stack: Stack) -> str:
    """C's reply takes D in (no reorder window: D waited on the thread's lane), and another
    writer's reply to D that saw D alone came first: it answers D, and its send fails, so D
    is dead-lettered; C, which its writer did not see, is written anew in the same burst
    (F21). The operator's retry of D's letter comes during that call and is taken in when
    it ends. Returns D's event id once the retry was let go, its event in progress."""
    webhook = _seed(stack, D, "2026-11-29T10:01:00.000Z")
    await stack.deliver(_seed(stack, C, "2026-11-29T10:00:00.000Z"))
    await stack.deliver(webhook)
    stack.worker(**_gated(stack))
    await until(stack, lambda: len(model_calls(stack)) == 1, "C's writer call")
    await _theirs_first(stack, D, covers=())
    stack.mail.fail_next(1, status=500)
    _let_through(stack, 2)
    await until(stack, lambda: len(model_calls(stack)) == 3, "C written anew")

    event_id = str(webhook["event_id"])
    assert _letters(stack, "send_failed") == [[event_id]]
    _retry(stack)
    _let_through(stack, 3)
    running = "the retry let go: its event in progress"
    await _let_go(stack, event_id, Stage.DEDUPE, "in_progress", replay=True, what=running)
    return event_id


async def test_a_retry_that_meets_its_event_in_progress_is_dead_lettered_again_and_retried_later(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=1, reorder_window_ms=0, send_attempts=1)
    event_id = await _retry_meets_running_burst(stack)
    await stack.until_sent(1)  # C's reply: the burst went on past the retry

    assert _letters(stack, "retry_raced") == [[event_id]]
    assert [e.replied_to_message_id for e in stack.mail.outbox] == [C]

    _retry(stack)
    await stack.until_sent(2)
    assert sent_to(stack) == Counter({C: 1, D: 1})
    assert [e.text for e in stack.mail.outbox if e.replied_to_message_id == D] == [THEIRS]
    assert state_of(stack, reply_key(INBOX, D)) is ReplyState.SENT
    assert _open_letters(stack) == []
    judged = verdict(stack, [C, D])
    assert judged.passed, judged.violations


# -- F37: a claim whose outcome was lost -------------------------------------------------
E = "<f37-e@example.com>"


async def test_a_retry_meets_a_claim_its_committed_record_left_in_progress_and_answers(
    stack_factory: Callable[..., Stack],
) -> None:
    """E's send failed and was dead-lettered; its event's *failed* outcome, a table write
    faust does not await, was lost while the broker was away: the changelog says *in
    progress*, owned by E's record, which the worker committed. This test writes the
    changelog so, with the worker stopped. The restarted worker's store has the claim; the
    operator's retry meets it and, the owner committed before the worker was given the
    partition, answers E (it was dead-lettered again, ``retry_raced``, and E was left
    unanswered: the simulator's finding F37)."""
    stack = stack_factory(partitions=1, reorder_window_ms=0, send_attempts=1)
    webhook = _seed(stack, E, "2026-11-29T10:00:00.000Z")
    event_id = str(webhook["event_id"])
    stack.mail.fail_next(1, status=500)
    await stack.deliver(webhook)
    worker = stack.worker(**model_env(stack))
    await until(stack, lambda: _letters(stack, "send_failed") == [[event_id]], "E's letter")
    worker.stop()
    [record] = [
        r
        for r in consume_all(stack.settings, stack.settings.deliveries_topic)
        if r.key() == f"agentmail:{THREAD}".encode()
    ]
    owner = (int(record.partition()), int(record.offset()))
    claim = EventEntry(EventState.IN_PROGRESS, 0, owner)
    await stack.producer.produce(
        f"{stack.settings.app_id}-events-changelog",
        json.dumps(claim.to_json()).encode(),
        key=f"agentmail:{event_id}".encode(),
        partition=owner[0],
    )

    worker = stack.worker(**model_env(stack))
    _retry(stack)
    await stack.until_sent(1)

    assert [e.replied_to_message_id for e in stack.mail.outbox] == [E]
    assert "left in progress by a record committed before" in worker.log()
    await until(stack, lambda: _open_letters(stack) == [], "no letter open")
    assert _letters(stack, "retry_raced") == []

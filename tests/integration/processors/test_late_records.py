"""Two simulator findings made real: real worker processes, the real broker and the local
AgentMail server.

F30: another writer (a worker that applied a person's approval, then paused past its
session) sends a draft and records it *sent* after the owner's store had it awaiting; a
newer message in the thread then leaves that draft answered once: its message is not
recalled into the newer reply, which a person then approves. The other writer is this
test, landing its records in the worker's ledger partition and sending its email through
the mail API, as that worker would once it woke.

F34: another writer's *covered* record of a message, covered by the reply of a message the
owner's draft of it covers, made before that draft (before the rebalance) and landed after
it, does not settle the key when a person approves the draft: the approved text is sent,
once.

F33: a worker whose writer failed is stopped between the reply's two records of the
failure, the dead letter and the *failed* record: the first of them to land freezes it
(SIGSTOP, then SIGKILL), its writes held back by a 1 s producer linger. It leaves the
letter, never a *failed* record with no letter, and the message ends answered once; on the
writer's path (the writer fails) and on the send's (the send fails for good).

F35: another writer's draft of a message, landed late, does not stay in the approvals
list when the owner's writer fails for that message's burst: every message of the letter
is recorded *failed*, and the letter's retry answers them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer, TopicPartition

from onceonly.foundation.kafka import Connection
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.conftest import consume_all
from tests.integration.workers import (
    INBOX,
    Stack,
    WorkerProcess,
    dead_letters,
    handled,
    ledger_records,
    model_calls,
    model_env,
    onceonly,
    sent_to,
    until,
    verdict,
    writer_env,
)

pytestmark = pytest.mark.integration

THREAD = "thr-late"


def _stamped(record: ReplyRecord) -> ReplyRecord:
    """``record`` as a worker makes it: stamped with the time it was made."""
    return dataclasses.replace(record, written_at=datetime.now(UTC))


async def _land(stack: Stack, record: ReplyRecord) -> None:
    """``record`` produced to the ledger's one partition, as another writer lands it."""
    await stack.producer.produce(
        stack.settings.ledger_topic, record.encode(), key=record.key.encode(), partition=0
    )


async def _recorded(stack: Stack, key: str, state: ReplyState) -> ReplyRecord:
    """The ledger's record of ``key``, once it says ``state``."""
    await until(
        stack,
        lambda: (r := ledger_records(stack).get(key)) is not None and r.state is state,
        f"{key} recorded {state.value}",
    )
    return ledger_records(stack)[key]


async def _sent_by_another_writer(stack: Stack, draft: ReplyRecord) -> ReplyRecord:
    """What a worker that applied a person's approval of ``draft`` and paused before the
    send leaves once it wakes: its *pending* record with the approval, the approved text
    sent with the draft's key, its *sent* record. Returns the sent record."""
    approval = Approval(Verdict.APPROVED, "ana", datetime.now(UTC), "d-late")
    approved = _stamped(draft.with_state(ReplyState.PENDING, approval=approval))
    await _land(stack, approved)
    sender = AgentMailSender("test-api-key", base_url=stack.mail.base_url, timeout_s=10)
    try:
        sent_id = await sender.reply(approved)
    finally:
        await sender.aclose()
    sent = _stamped(approved.with_state(ReplyState.SENT, sent_message_id=sent_id))
    await _land(stack, sent)
    return sent


async def test_a_newer_message_does_not_recall_a_draft_another_writer_sent_meanwhile(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F30: the owner's store still said m6 awaiting when m62 came;
    # its superseding mark landed after the other writer's sent record, which the ledger
    # writes again after the mark; m62's reply must not answer m6 a second time
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    stack.worker(ONCEONLY_APPROVAL="always", **writer_env(stack))
    old, new = "<m6@example.com>", "<m62@example.com>"
    await stack.deliver(stack.seed(old, THREAD))
    draft = await _recorded(stack, reply_key(INBOX, old), ReplyState.AWAITING)
    sent = await _sent_by_another_writer(stack, draft)

    await stack.deliver(stack.seed(new, THREAD, timestamp="2026-11-29T10:05:00.000Z"))
    newer = await _recorded(stack, reply_key(INBOX, new), ReplyState.AWAITING)
    approved = onceonly(stack, "approvals", "approve", newer.key, "--by", "ana")

    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["state"] == "sent"
    judged = verdict(stack, [old, new])
    assert judged.passed and judged.count("answered") == 2, judged.violations
    assert sent_to(stack) == Counter({old: 1, new: 1})
    assert newer.covers == () and "to 1 message(s)" in (newer.reply_text or "")
    assert ledger_records(stack)[draft.key] == sent  # m6 stays sent, its email the only one
    [email] = [e for e in stack.mail.outbox if e.replied_to_message_id == new]
    assert email.text == newer.reply_text


async def test_an_approved_draft_after_a_late_cover_by_a_reply_it_covers_is_sent_once(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F34 (seed 620020667, approval on): a worker paused past its
    # fence check landed m31's *covered* record (covered by m30's reply; made before the
    # rebalance) after the owner's draft of m31, which covers m30, and the owner wrote its
    # draft again after it; the owner's approval was then ruled settled by that record,
    # which was written again after the approved one, and neither m30 nor m31 got an email
    stack = stack_factory(partitions=1, reorder_window_ms=3000)
    stack.worker(ONCEONLY_APPROVAL="always", ONCEONLY_LEDGER_AUDIT_S="1", **writer_env(stack))
    older, message = "<m30@example.com>", "<m31@example.com>"
    first = stack.seed(older, THREAD, timestamp="2026-11-29T10:00:00.000Z")
    second = stack.seed(message, THREAD, timestamp="2026-11-29T10:01:00.000Z")
    await asyncio.gather(stack.deliver(first), stack.deliver(second))
    draft = await _recorded(stack, reply_key(INBOX, message), ReplyState.AWAITING)
    assert draft.covers == (reply_key(INBOX, older),)  # one burst: the draft covers m30
    late = draft.with_state(
        ReplyState.COVERED,
        covered_by=reply_key(INBOX, older),
        reply_text=None,
        covers=None,
        written_at=draft.made_at - timedelta(seconds=30),
    )
    await _land(stack, late)
    # the owner's audit reads it and writes its draft again after it: a person sees the draft
    assert await _recorded(stack, draft.key, ReplyState.AWAITING) == draft
    assert _history(stack, draft.key)[-2:] == [late, draft]  # the late record, then the draft

    approved = onceonly(stack, "approvals", "approve", draft.key, "--by", "ana")

    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["state"] == "sent"
    assert sent_to(stack) == Counter({message: 1})
    assert ledger_records(stack)[draft.key].state is ReplyState.SENT
    judged = verdict(stack, [older, message])
    assert judged.passed, judged.violations


def _history(stack: Stack, key: str) -> list[ReplyRecord]:
    """Every ledger record of ``key``, in log order."""
    found = consume_all(stack.settings, stack.settings.ledger_topic)
    return [ReplyRecord.decode(r.value()) for r in found if r.key() == key.encode()]


def _freeze_at_first_write(stack: Stack, worker: WorkerProcess, timeout_s: float = 60) -> str:
    """Watch the ledger and dead-letter topics from their ends now; at the first record
    that lands in either, stop ``worker`` (SIGSTOP). Returns that record's topic."""
    settings = stack.settings
    consumer = Consumer(
        Connection.from_settings(settings).config(
            **{
                "group.id": f"watch-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
    )
    try:
        ends = []
        for topic in (settings.ledger_topic, settings.dead_letter_topic):
            for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                end = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]
                ends.append(TopicPartition(topic, partition, end))
        consumer.assign(ends)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            record = consumer.poll(0.05)
            if record is not None and record.error() is None:
                worker.signal(signal.SIGSTOP)
                return str(record.topic())
        raise AssertionError(f"nothing landed in {timeout_s} s:\n{stack.logs()}")
    finally:
        consumer.close()


async def _stopped_restarted_retried(
    stack: Stack, worker: WorkerProcess, message: str
) -> subprocess.CompletedProcess[str]:
    """Freeze ``worker`` at the first write that lands and kill it: it left the dead letter
    or the *failed* record of ``message``'s reply, one of them. Then start it again (the
    mail API prompt again), retry the dead letters once every delivery is handled, and
    check ``message`` answered once. Returns the retry's output."""
    key = reply_key(INBOX, message)
    first = await asyncio.to_thread(_freeze_at_first_write, stack, worker)
    worker.kill()
    stack.mail.set_latency(0.0)
    letters = [x for x in dead_letters(stack) if x.get("key") == key]
    record = ledger_records(stack).get(key)
    left = (len(letters), record is not None and record.state is ReplyState.FAILED)
    assert sum(left) == 1, f"stopped at a write to {first}, it left (letters, failed) {left}"
    worker.start()
    await handled(stack)
    retried = onceonly(stack, "dead-letters", "retry")
    assert retried.returncode == 0, retried.stderr
    await handled(stack)
    judged = verdict(stack, [message])
    assert judged.passed and judged.count("answered") == 1, judged.violations
    assert sent_to(stack) == Counter({message: 1})
    assert ledger_records(stack)[key].state is ReplyState.SENT
    return retried


async def test_a_worker_stopped_between_the_dead_letter_and_the_failed_record_answers_once(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F33: the writer fails (once: the model is down, then up), and
    # the worker is killed right after the first of the failure's two writes lands (each
    # write waits 1 s in its producer, so the kill comes before the second)
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    env = model_env(stack, ONCEONLY_WRITER_ATTEMPTS="1", ONCEONLY_TEST_WRITER_DELAY_S="3")
    worker = stack.worker(**env, ONCEONLY_PRODUCE_LINGER_MS="1000")
    message = "<m23@example.com>"
    await stack.deliver(stack.seed(message, THREAD, text="FAIL-ONCE"))
    await until(stack, lambda: bool(model_calls(stack)), "the writer's call")

    # the next owner: the redelivered message, the writer up again
    retried = await _stopped_restarted_retried(stack, worker, message)

    assert "1 event(s) from 1 dead letter(s)" in retried.stdout  # its letter, retried
    assert "1 dead letter(s), 0 open" in onceonly(stack, "dead-letters", "list").stdout


async def test_a_worker_stopped_between_a_failed_send_s_dead_letter_and_failed_record_answers_once(
    stack_factory: Callable[..., Stack],
) -> None:
    # F33 on the send's path: the send fails for good (one attempt; the mail API answers
    # 500 once, then is up), every request to it takes 3 s, so the watch is on before the
    # failure's two writes; the worker is killed right after the first of them lands (each
    # write waits 1 s in its producer, so the kill comes before the second)
    stack = stack_factory(partitions=1, reorder_window_ms=0, send_attempts=1)
    worker = stack.worker(ONCEONLY_PRODUCE_LINGER_MS="1000")
    message, key = "<m24@example.com>", reply_key(INBOX, "<m24@example.com>")
    stack.mail.fail_next(1, status=500)
    stack.mail.set_latency(3.0)
    await stack.deliver(stack.seed(message, THREAD))
    await _recorded(stack, key, ReplyState.PENDING)  # recorded before the send

    # the next owner: the pending record reconciled, the mail API up
    await _stopped_restarted_retried(stack, worker, message)


def _listed(stack: Stack) -> list[str]:
    """The keys ``onceonly approvals list`` shows."""
    listed = onceonly(stack, "approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line)["key"] for line in listed.stdout.splitlines()]


async def test_a_late_draft_of_a_message_in_a_failed_writers_letter_leaves_the_approvals_list(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F35 (seed 631019768, approval on): another writer's draft of
    # m42, made before the rebalance, landed late; the owner's writer failed for m42's
    # burst with m50, and only m50 was recorded failed: the late draft stayed m42's last
    # word, in the approvals list, and no approval of it reached a record of the worker's
    stack = stack_factory(partitions=1, reorder_window_ms=3000)
    stack.worker(ONCEONLY_APPROVAL="always", **model_env(stack, ONCEONLY_WRITER_ATTEMPTS="1"))
    warm, older, newer = "<m1@example.com>", "<m42@example.com>", "<m50@example.com>"
    key = reply_key(INBOX, older)
    # the worker's store recovered and live (a draft of another thread recorded): records
    # that land from now on are other writers' late ones, which its store does not read
    await stack.deliver(stack.seed(warm, "thr-warm"))
    await _recorded(stack, reply_key(INBOX, warm), ReplyState.AWAITING)
    made = datetime.now(UTC) - timedelta(seconds=30)
    late = ReplyRecord(
        key, INBOX, older, f"agentmail:{THREAD}", ReplyState.AWAITING, made,
        reply_text="a draft of m42", covers=(), written_at=made,
    )  # fmt: skip
    await _land(stack, late)
    first = stack.seed(older, THREAD, timestamp="2026-11-29T10:00:00.000Z")
    second = stack.seed(newer, THREAD, timestamp="2026-11-29T10:01:00.000Z", text="FAIL-ONCE")
    await asyncio.gather(stack.deliver(first), stack.deliver(second))
    await _recorded(stack, reply_key(INBOX, newer), ReplyState.FAILED)
    await handled(stack)

    assert ledger_records(stack)[key].state is ReplyState.FAILED  # after the late draft
    assert key not in _listed(stack)
    retried = onceonly(stack, "dead-letters", "retry")
    assert retried.returncode == 0, retried.stderr
    # each message written again (a replay with approval on is a burst of its own)
    keys = [key, reply_key(INBOX, newer)]

    def written_again() -> bool:
        records = ledger_records(stack)
        return all(k in records and records[k].state is not ReplyState.FAILED for k in keys)

    await until(stack, written_again, "the letter's messages written again")
    await handled(stack)
    for draft in _listed(stack):  # the drafts left, each approved
        onceonly(stack, "approvals", "approve", draft, "--by", "ana")
    judged = verdict(stack, [warm, older, newer])
    assert judged.passed, judged.violations
    assert max(sent_to(stack).values()) == 1

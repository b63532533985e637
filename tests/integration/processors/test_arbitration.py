"""Arbitration in the ledger, on a real worker and broker: another writer's record that
lands in the ledger topic while the worker's model call runs (a zombie past its fence
check, waking) decides what the worker sends.

The other writer is this test, producing to the worker's own ledger partition, as a
worker paused after its fence check would once it woke.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.conftest import consume_all
from tests.integration.workers import (
    INBOX,
    SESSION_S,
    Stack,
    WorkerProcess,
    ledger_records,
    model_calls,
    state_of,
    until,
)

pytestmark = pytest.mark.integration

MESSAGE, THREAD = "<arb-1@example.com>", "t-arb"


def _writer_ended(stack: Stack) -> bool:
    return bool(model_calls(stack, "end"))


def _partition_of_thread(stack: Stack) -> int:
    [record] = [
        r
        for r in consume_all(stack.settings, stack.settings.deliveries_topic)
        if r.key() == f"agentmail:{THREAD}".encode()
    ]
    return int(record.partition())


async def _start(stack_factory: Callable[..., Stack]) -> tuple[Stack, Any, str, int]:
    """A worker whose model call for the message runs 6 s; returns once it has begun."""
    stack = stack_factory(reorder_window_ms=0)
    worker = stack.worker(
        ONCEONLY_REPLY_WRITER="tests.integration.writers:model",
        ONCEONLY_TEST_WRITER_LOG=str(stack.tmp / "writer.jsonl"),
    )
    await stack.deliver(stack.seed(MESSAGE, THREAD, text="SLOW=6"))
    await until(stack, lambda: bool(model_calls(stack)), "the model call")
    return stack, worker, reply_key(INBOX, MESSAGE), _partition_of_thread(stack)


async def _land(stack: Stack, partition: int, record: ReplyRecord) -> None:
    await stack.producer.produce(
        stack.settings.ledger_topic, record.encode(), key=record.key.encode(), partition=partition
    )


def _theirs(key: str, state: ReplyState, text: str | None, **changes: Any) -> ReplyRecord:
    return ReplyRecord(
        key, INBOX, MESSAGE, f"agentmail:{THREAD}", state, datetime.now(UTC), text, **changes
    )


async def test_a_pending_text_another_writer_landed_first_is_the_one_sent(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, _, key, partition = await _start(stack_factory)
    await _land(stack, partition, _theirs(key, ReplyState.PENDING, "the first writer's text"))
    assert not _writer_ended(stack)  # landed before the worker's own record

    await until(
        stack,
        lambda: state_of(stack, key) is ReplyState.SENT,
        "the sent record",
    )

    assert [e.text for e in stack.mail.outbox] == ["the first writer's text"]
    assert ledger_records(stack)[key].reply_text == "the first writer's text"
    assert _writer_ended(stack)  # the worker wrote its own text, and did not send it


async def test_a_reply_another_writer_recorded_sent_first_is_not_sent_again(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, key, partition = await _start(stack_factory)
    theirs = _theirs(key, ReplyState.SENT, "theirs", sent_message_id="<sent-by-them@x>")
    await _land(stack, partition, theirs)
    assert not _writer_ended(stack)

    await until(
        stack,
        lambda: "reply recorded sent by another writer first" in worker.log(),
        "the worker's ruling",
    )

    assert stack.mail.outbox == []
    record = ledger_records(stack)[key]
    assert (record.state, record.sent_message_id) == (ReplyState.SENT, "<sent-by-them@x>")


async def _landed_between_own_records(
    stack_factory: Callable[..., Stack], theirs: ReplyRecord
) -> tuple[Stack, WorkerProcess]:
    """One worker on one partition answers a message, another writer's ``theirs`` lands on
    the ledger, and the worker answers a second message: its records either side of it."""
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    worker = stack.worker(
        ONCEONLY_REPLY_WRITER="tests.integration.writers:model",
        ONCEONLY_TEST_WRITER_LOG=str(stack.tmp / "writer.jsonl"),
    )
    await stack.deliver(stack.seed("<arb-before@example.com>", "t-before", text="hello"))
    await stack.until_sent(1)
    await _land(stack, 0, theirs)
    await stack.deliver(stack.seed("<arb-after@example.com>", "t-after", text="hello"))
    await stack.until_sent(2)
    return stack, worker


async def test_a_record_landed_before_the_workers_own_is_still_read_after_it_rejoins(
    stack_factory: Callable[..., Stack],
) -> None:
    # another writer's pending record lands between two of the worker's ledger records:
    # the store's offset stays before it (ContiguousTable), and the worker's own account
    # of the ledger's offsets knows it too: either way it decides what is sent.
    key = reply_key(INBOX, MESSAGE)
    theirs = _theirs(key, ReplyState.PENDING, "the first writer's text")
    stack, worker = await _landed_between_own_records(stack_factory, theirs)
    landed = [r.key().decode() for r in consume_all(stack.settings, stack.settings.ledger_topic)]
    assert landed.index(key) < max(i for i, k in enumerate(landed) if k != key)

    worker.signal(signal.SIGSTOP)
    await asyncio.sleep(SESSION_S + 5)
    worker.signal(signal.SIGCONT)
    await until(stack, lambda: worker.log().count("joined the consumer group") >= 2, "the rejoin")
    await stack.deliver(stack.seed(MESSAGE, THREAD, text="hello"))
    await stack.until_sent(3)

    assert stack.mail.outbox[-1].text == "the first writer's text"
    assert "ledger: another writer's records read" in worker.log()


async def test_a_record_landed_before_the_workers_own_is_in_its_store_after_a_restart(
    stack_factory: Callable[..., Stack],
) -> None:
    # the next owner answered the message while this worker was paused past its session;
    # this worker's own write, acknowledged after that, must not move its store's offset
    # past the next owner's record: a restart with its state recovers from before it
    # (faust moved the offset, the store never held it, and the message, delivered
    # again, was answered again: the simulator's finding F3)
    key = reply_key(INBOX, MESSAGE)
    theirs = _theirs(key, ReplyState.SENT, "the next owner's", sent_message_id="<by-them@x>")
    stack, worker = await _landed_between_own_records(stack_factory, theirs)

    worker.kill()
    worker.start()
    await stack.deliver(stack.seed(MESSAGE, THREAD, text="hello"))
    await until(
        stack,
        lambda: "reply skipped: already handled" in worker.log() or len(stack.mail.outbox) > 2,
        "the message skipped, or answered again",
    )

    assert [e.replied_to_message_id for e in stack.mail.outbox] == [
        "<arb-before@example.com>",
        "<arb-after@example.com>",
    ]
    assert ledger_records(stack)[key].sent_message_id == "<by-them@x>"


#: another writer's records that may land late (a worker past its fence check), by finding
LATE = {
    "F19 pending": {"state": ReplyState.PENDING, "text": "a late writer's text"},
    "F7 failed": {"state": ReplyState.FAILED, "text": None, "error": "writer_failed"},
    "F10 covered": {"state": ReplyState.COVERED, "text": None, "covered_by": "reply-other"},
    "F12 awaiting": {"state": ReplyState.AWAITING, "text": "a late writer's draft"},
}


@pytest.mark.parametrize("late", list(LATE.values()), ids=list(LATE))
async def test_a_late_record_after_the_owners_sent_one_is_followed_by_it(
    stack_factory: Callable[..., Stack], late: dict[str, Any]
) -> None:
    # a worker past its fence check lands its record of a key after the owner recorded the
    # key sent, and is stopped (killed, or its lane cancelled by the drain) before it
    # writes the sent record again itself (F19): the owner's audit does
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    worker = stack.worker(
        ONCEONLY_REPLY_WRITER="tests.integration.writers:model",
        ONCEONLY_TEST_WRITER_LOG=str(stack.tmp / "writer.jsonl"),
        ONCEONLY_LEDGER_AUDIT_S="1",
    )
    key = reply_key(INBOX, MESSAGE)
    await stack.deliver(stack.seed(MESSAGE, THREAD, text="hello"))
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "the sent record")
    sent = ledger_records(stack)[key]

    changes = {k: v for k, v in late.items() if k not in ("state", "text")}
    await _land(stack, 0, _theirs(key, late["state"], late["text"], **changes))
    await until(
        stack,
        lambda: "another writer's late record of a key" in worker.log(),
        "the owner's audit",
    )

    assert ledger_records(stack)[key] == sent
    assert len(stack.mail.outbox) == 1


def _made(record: ReplyRecord, before: ReplyRecord | None = None) -> ReplyRecord:
    """``record`` stamped as a worker stamps it: made now, or 30 s before ``before`` was
    (a late writer's, made before its fence check)."""
    now = datetime.now(UTC)
    at = now if before is None or before.written_at is None else before.written_at
    return dataclasses.replace(record, written_at=at - timedelta(seconds=30 if before else 0))


def _f29(key: str) -> tuple[ReplyRecord, ReplyRecord]:
    # a late writer's pending record after the last owner recorded the key sent
    sent = _made(_theirs(key, ReplyState.SENT, "the last owner's", sent_message_id="<by@x>"))
    return sent, _made(_theirs(key, ReplyState.PENDING, "a late writer's text"), before=sent)


def _f31(key: str) -> tuple[ReplyRecord, ReplyRecord]:
    # a late writer's stale draft after the last owner approved the draft (both keep the
    # draft's created_at)
    approval = Approval(Verdict.APPROVED, "ana", datetime.now(UTC), "d-1")
    draft = _theirs(key, ReplyState.AWAITING, "the draft")
    approved = _made(draft.with_state(ReplyState.PENDING, approval=approval))
    return approved, _made(draft, before=approved)


def _f29_version_4(key: str) -> tuple[ReplyRecord, ReplyRecord]:
    # records written before version 5 (no written_at) are judged by created_at
    sent = _theirs(key, ReplyState.SENT, "the last owner's", sent_message_id="<by@x>")
    late = _theirs(key, ReplyState.PENDING, "a late writer's text")
    return sent, dataclasses.replace(late, created_at=sent.created_at - timedelta(seconds=30))


async def _landed_late(
    stack_factory: Callable[..., Stack], case: Callable[[str], tuple[ReplyRecord, ReplyRecord]]
) -> tuple[Stack, str, ReplyRecord, ReplyRecord]:
    """A one-partition stack whose ledger holds ``case``'s two records of the message's key,
    the last owner's and then a late writer's, no worker started yet."""
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    key = reply_key(INBOX, MESSAGE)
    owners, late = case(key)
    await _land(stack, 0, owners)
    await _land(stack, 0, late)
    assert ledger_records(stack)[key] == late
    return stack, key, owners, late


@pytest.mark.parametrize("case", [_f29, _f31, _f29_version_4], ids=["F29", "F31", "F29 v4"])
async def test_a_new_owner_repairs_a_late_record_its_last_owner_did_not(
    stack_factory: Callable[..., Stack],
    case: Callable[[str], tuple[ReplyRecord, ReplyRecord]],
) -> None:
    # a late writer's record landed after the last owner's, made after it, and neither
    # repaired it (the late writer stopped, the owner killed before its audit); a worker
    # taking the partition over writes the owner's record again after it
    stack, key, owners, _ = await _landed_late(stack_factory, case)

    worker = stack.worker(ONCEONLY_LEDGER_AUDIT_S="1")
    await until(
        stack, lambda: "when this worker took the partition over" in worker.log(), "the take-over"
    )

    assert ledger_records(stack)[key] == owners
    if owners.state is ReplyState.SENT:
        assert stack.mail.outbox == []


def _f38(key: str) -> tuple[ReplyRecord, ReplyRecord]:
    # a late writer's pending record after the last owner's newer pending one (its writer
    # saw more of the thread), both stopped before either sent
    owners = _made(_theirs(key, ReplyState.PENDING, "the last owner's text"))
    return owners, _made(_theirs(key, ReplyState.PENDING, "a late writer's text"), before=owners)


@pytest.mark.parametrize("case", [_f38, _f29], ids=["F38", "F29"])
async def test_a_recovered_late_record_is_not_sent_before_the_take_over(
    stack_factory: Callable[..., Stack],
    case: Callable[[str], tuple[ReplyRecord, ReplyRecord]],
) -> None:
    # as above, and the message is read again by the worker taking the partition over: its
    # lane finishes the recovered record at once, long before the audit (an hour away)
    # would take the partition over; the take-over comes first all the same
    stack, key, owners, _ = await _landed_late(stack_factory, case)
    await stack.deliver(stack.seed(MESSAGE, THREAD, text="hello"))

    worker = stack.worker(ONCEONLY_LEDGER_AUDIT_S="3600")
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "the sent record")

    assert "when this worker took the partition over" in worker.log()
    if owners.state is ReplyState.SENT:  # the lane read the key after the take-over
        await until(stack, lambda: "reason=skip_sent" in worker.log(), "the lane's skip")
        assert (stack.mail.outbox, ledger_records(stack)[key]) == ([], owners)
    else:
        assert [e.text for e in stack.mail.outbox] == ["the last owner's text"]
        assert ledger_records(stack)[key].reply_text == "the last owner's text"

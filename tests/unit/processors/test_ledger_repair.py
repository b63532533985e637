"""The owner settles a key again after another writer's late record (the simulator's
finding F19): a worker past its fence check lands a *pending* record of a key the owner
has sent, and is killed, or its lane cancelled by its drain, before it writes the sent
record again itself. The owner reads that record at its next write to the partition, or
at its timer's audit, and writes its settled record after it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from onceonly.processors.reply.ledger import TableLedger
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.processors._ledger_log import T0, LogTable, Reads, record

Topic = list[tuple[bytes, bytes]]


def _owner() -> tuple[TableLedger, LogTable, Topic, Reads]:
    topic: Topic = []
    table = LogTable(topic, 0)
    reads = Reads(topic)
    return TableLedger(table, read_log=reads), table, topic, reads  # type: ignore[arg-type]


def _sent(key: str = "k") -> ReplyRecord:
    return record(key, ReplyState.SENT, "the owner's", sent_message_id="<r@x>")


def _last(topic: Topic, key: bytes = b"k") -> ReplyRecord:
    return ReplyRecord.decode([value for k, value in topic if k == key][-1])


async def _owner_sent_then_late_pending() -> tuple[TableLedger, LogTable, Topic, Reads]:
    ledger, table, topic, reads = _owner()
    await ledger.put(record("k", ReplyState.PENDING, "the owner's"))
    await ledger.put(_sent())
    topic.append((b"k", record("k", ReplyState.PENDING, "the zombie's").encode()))
    return ledger, table, topic, reads


async def test_the_audit_writes_the_settled_record_after_a_late_pending_one() -> None:
    ledger, _, topic, reads = await _owner_sent_then_late_pending()

    ran = await ledger.audit(0, len(topic))

    assert ran
    assert reads.calls == [(0, 2, 2)]
    assert _last(topic) == _sent()
    assert len(topic) == 4


async def test_the_owners_next_write_to_the_partition_settles_the_key_again() -> None:
    ledger, _, topic, _ = await _owner_sent_then_late_pending()

    await ledger.put(record("other", ReplyState.PENDING, "another reply"))

    assert _last(topic) == _sent()


async def test_a_second_audit_reads_and_writes_nothing_more() -> None:
    ledger, _, topic, reads = await _owner_sent_then_late_pending()
    await ledger.audit(0, len(topic))
    written, calls = len(topic), len(reads.calls)

    assert await ledger.audit(0, len(topic))

    assert (len(topic), len(reads.calls)) == (written, calls)


async def test_an_audit_reads_nothing_when_every_record_is_the_owners() -> None:
    ledger, _, topic, reads = _owner()
    await ledger.put(record("k", ReplyState.PENDING, "the owner's"))
    await ledger.put(_sent())

    assert await ledger.audit(0, len(topic))

    assert (reads.calls, len(topic)) == ([], 2)


async def test_a_late_record_of_a_key_the_owner_has_not_settled_is_left() -> None:
    ledger, _, topic, _ = _owner()
    await ledger.put(record("k", ReplyState.PENDING, "the owner's"))
    late = record("k", ReplyState.PENDING, "the zombie's")
    topic.append((b"k", late.encode()))

    await ledger.audit(0, len(topic))

    assert len(topic) == 2  # its own send arbitrates it (the first pending owns the text)


async def test_a_late_settling_record_is_not_followed() -> None:
    ledger, _, topic, _ = _owner()
    await ledger.put(_sent())
    topic.append((b"k", record("k", ReplyState.SENT, "theirs", sent_message_id="<z@x>").encode()))

    await ledger.audit(0, len(topic))

    assert len(topic) == 2


async def test_another_writers_pending_then_sent_records_read_together_need_nothing() -> None:
    # an earlier owner's records of a key, pending then sent, read in one gap by a worker
    # whose store holds the key sent (its recovery read it): the sent one is already last
    ledger, table, topic, _ = _owner()
    await ledger.put(record("a", ReplyState.PENDING, "a's"))
    topic.append((b"k", record("k", ReplyState.PENDING, "theirs").encode()))
    topic.append((b"k", _sent().encode()))
    table.store[b"k"] = _sent().encode()

    await ledger.audit(0, len(topic))

    assert len(topic) == 3


async def test_no_audit_while_an_own_write_is_under_way() -> None:
    # its record has landed but the ack has not come back: the audit would take the own
    # record for another writer's
    ledger, table, topic, reads = await _owner_sent_then_late_pending()
    table.hold = asyncio.Event()
    writing = asyncio.create_task(ledger.put(record("j", ReplyState.SENT, "j's")))
    await asyncio.sleep(0)

    ran = await asyncio.wait_for(ledger.audit(0, len(topic)), 5.0)

    assert (ran, reads.calls, len(topic)) == (False, [], 4)
    table.hold.set()
    await writing
    assert await ledger.audit(0, len(topic))
    assert _last(topic) == _sent()


async def test_a_late_covered_record_after_the_owners_sent_one_is_followed_by_it() -> None:
    # F10's late record: covered, after the key's email went out
    ledger, _, topic, _ = _owner()
    await ledger.put(_sent())
    topic.append((b"k", record("k", ReplyState.COVERED, None, covered_by="reply-x").encode()))

    await ledger.audit(0, len(topic))

    assert _last(topic) == _sent()


def _failed() -> ReplyRecord:
    return record("k", ReplyState.FAILED, None, reason="writer failed")


@pytest.mark.parametrize(
    "late",
    [
        # F24: it may be the next owner's draft for the dead letter an operator retried,
        # read by a worker that woke from a pause with its old failed record: an unfenced
        # audit write repeating that record would put the dead letter back over the draft
        record("k", ReplyState.AWAITING, "the retry's draft"),
        # its text goes out with the key's reply: the key's next owner sends it
        record("k", ReplyState.PENDING, "the zombie's"),
    ],
    ids=lambda late: late.state.value,
)
async def test_a_late_record_after_an_own_failed_record_is_left(late: ReplyRecord) -> None:
    ledger, _, topic, _ = _owner()
    await ledger.put(_failed())
    topic.append((b"k", late.encode()))

    await ledger.audit(0, len(topic))

    assert _last(topic) == late


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _drafted_owner() -> tuple[TableLedger, Topic]:
    topic: Topic = []
    ledger = TableLedger(LogTable(topic, 0), read_log=Reads(topic), clock=lambda: _at(10))  # type: ignore[arg-type]
    return ledger, topic


_APPROVED = Approval(Verdict.APPROVED, "ana", T0, "d1")


@pytest.mark.parametrize(
    "own",
    [
        record("k", ReplyState.AWAITING, "the owner's draft"),
        record("k", ReplyState.PENDING, "the owner's draft", approval=_APPROVED),
    ],
    ids=["draft", "approved"],
)
@pytest.mark.parametrize(
    "late",
    [
        record("k", ReplyState.COVERED, "theirs", covered_by="reply-x"),
        record("k", ReplyState.FAILED, None, reason="writer failed"),
        record("k", ReplyState.AWAITING, "their older draft"),
    ],
    ids=lambda late: late.state.value,
)
async def test_a_late_record_made_before_the_owners_draft_is_followed_by_it(
    own: ReplyRecord, late: ReplyRecord
) -> None:
    # F17's and F31's late records, the late writer stopped before it wrote the owner's
    # draft again: the owner's audit does, so the draft stays the key's last word
    ledger, topic = _drafted_owner()
    await ledger.put(own)
    topic.append((b"k", replace(late, written_at=_at(5)).encode()))

    await ledger.audit(0, len(topic))

    assert (_last(topic), len(topic)) == (own, 3)


async def test_another_writers_record_made_after_the_owners_draft_is_left() -> None:
    # made after the draft: not late (a newer owner's, the owner itself the stale one)
    ledger, topic = _drafted_owner()
    own = record("k", ReplyState.AWAITING, "the owner's")
    await ledger.put(own)
    newer = record("k", ReplyState.COVERED, "the owner's", covered_by="reply-y")
    topic.append((b"k", replace(newer, written_at=_at(15)).encode()))

    await ledger.audit(0, len(topic))

    assert (_last(topic), len(topic)) == (newer, 2)


async def test_a_late_record_after_one_made_after_the_owners_draft_is_left_to_the_take_over() -> (
    None
):
    # a newer record (made after the draft) then a late one: the draft is not the key's
    # word (the newer record is: the next owner's take-over writes it again)
    ledger, topic = _drafted_owner()
    own = record("k", ReplyState.AWAITING, "the owner's")
    await ledger.put(own)
    newer = record("k", ReplyState.COVERED, "the owner's", covered_by="reply-y")
    late = record("k", ReplyState.FAILED, None, reason="writer failed")
    topic.append((b"k", replace(newer, written_at=_at(15)).encode()))
    topic.append((b"k", replace(late, written_at=_at(5)).encode()))

    await ledger.audit(0, len(topic))

    assert (_last(topic), len(topic)) == (late, 3)


class _SlowReads(Reads):
    """A log read that lets the lane's write start before it answers."""

    async def __call__(self, partition: int, first: int, last: int) -> Any:
        rows = list(await super().__call__(partition, first, last))
        for _ in range(5):
            await asyncio.sleep(0)
        return iter(rows)


class _StoreAtAck(LogTable):
    """A table whose store takes a write only at its acknowledgement, as faust's does
    (``FaustTable.write_through``); the acknowledgement waits for ``hold``."""

    async def write_through(
        self, key: bytes, value: bytes, partition: int | None = None
    ) -> tuple[int, int]:
        self.topic.append((key, value))
        offset = self.applied = len(self.topic) - 1
        if self.hold is not None:
            await self.hold.wait()
        self.store[key] = value
        return 0, offset


async def test_the_audit_leaves_a_draft_a_lane_is_replacing_meanwhile() -> None:
    # the review's race: the audit reads the log while a lane writes the draft's approval;
    # the store still says awaiting until the ack, and repeating the draft would land it
    # over the approval, which would then never be sent
    topic: Topic = []
    table, reads = _StoreAtAck(topic, 0), _SlowReads(topic)
    ledger = TableLedger(table, read_log=reads, clock=lambda: _at(10))  # type: ignore[arg-type]
    draft = record("k", ReplyState.AWAITING, "the owner's draft")
    await ledger.put(draft)
    older = record("k", ReplyState.AWAITING, "their older draft", written_at=_at(5))
    topic.append((b"k", older.encode()))
    approved = record("k", ReplyState.PENDING, "the owner's draft", approval=_APPROVED)
    table.hold = asyncio.Event()

    audit = asyncio.create_task(ledger.audit(0, len(topic)))
    await asyncio.sleep(0)
    writing = asyncio.create_task(ledger.put(approved))
    for _ in range(20):
        await asyncio.sleep(0)
    table.hold.set()
    await asyncio.wait_for(asyncio.gather(audit, writing), 5)

    assert _last(topic) == approved

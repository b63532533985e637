"""A reply recorded *failed* with its sends' outcomes unknown is read again in its thread
later, and recorded *sent* if its email went out after all (``reply.late_sends``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.reply import late_sends
from onceonly.processors.reply.late_sends import AT_MOST, READS, LateSends, due
from onceonly.processors.reply.parts import SendParts
from onceonly.processors.reply.sending import send_recorded
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.ledger import MemoryLedger
from tests.unit.processors._replying import FAST, StubSender

T0 = datetime(2026, 12, 7, tzinfo=UTC)


def _failed(key: str = "reply-1") -> ReplyRecord:
    return ReplyRecord(
        key=key,
        inbox_id="inbox",
        message_id="<m1@x>",
        thread_key="agentmail:t1",
        state=ReplyState.FAILED,
        created_at=T0,
        reply_text="hello",
        attempts=5,
        error="retryable: timed out",
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _checked(
    *,
    found: str | None = "<sent-1@x>",
    read_failures: tuple[SendError, ...] = (),
    after_s: float = 960.0,
    wait_s: float = 961.0,
    owned: bool = True,
    written_since: ReplyRecord | None = None,
) -> tuple[int, MemoryLedger, StubSender, int]:
    """A reply recorded failed at 0, checked at ``wait_s``: how many it settled, the
    ledger, the sender (its thread reads), and how many replies are still kept."""
    clock = Clock()
    late = LateSends(after_s, clock)
    ledger, sender = MemoryLedger(), StubSender(found=found, read_failures=read_failures)
    failed = _failed()
    await ledger.put(failed)
    late.failed(failed, sender)
    if written_since is not None:
        await ledger.put(written_since)
    clock.now = wait_s
    settled = await late.check(ledger, lambda key: owned)
    return settled, ledger, sender, len(late)


async def test_a_reply_whose_email_went_out_after_all_is_recorded_sent_once_due() -> None:
    settled, ledger, sender, kept = await _checked()

    record = ledger.get("reply-1")
    assert (settled, kept, sender.reads) == (1, 0, ["reply-1"])
    assert record is not None and record.state is ReplyState.SENT
    assert record.sent_message_id == "<sent-1@x>"


async def test_nothing_is_read_before_the_check_is_due() -> None:
    settled, ledger, sender, kept = await _checked(wait_s=959.0)

    assert (settled, kept, sender.reads) == (0, 1, [])
    assert ledger.writes[-1].state is ReplyState.FAILED


async def test_a_thread_without_the_email_leaves_the_reply_failed() -> None:
    settled, ledger, sender, kept = await _checked(found=None)

    assert (settled, kept, sender.reads) == (0, 0, ["reply-1"])
    assert [r.state for r in ledger.writes] == [ReplyState.FAILED]


async def test_a_reply_written_since_is_not_read_again() -> None:
    retried = _failed().with_state(ReplyState.PENDING)

    settled, ledger, sender, _ = await _checked(written_since=retried)

    assert (settled, sender.reads) == (0, [])
    assert ledger.writes[-1] is retried


async def test_a_reply_of_a_partition_the_worker_no_longer_owns_is_not_read() -> None:
    settled, ledger, sender, kept = await _checked(owned=False)

    assert (settled, kept, sender.reads) == (0, 0, [])
    assert ledger.writes[-1].state is ReplyState.FAILED


async def test_a_thread_that_cannot_be_read_is_kept_for_the_next_check() -> None:
    unreadable = SendError(SendFailure.RETRY, "thread read timed out")

    settled, ledger, _, kept = await _checked(read_failures=(unreadable,))

    assert (settled, kept) == (0, 1)
    assert ledger.writes[-1].state is ReplyState.FAILED


async def _many(count: int, sender: StubSender) -> tuple[LateSends, MemoryLedger, Clock]:
    """``count`` replies recorded failed at 0 through ``sender``, all due at 961."""
    clock = Clock()
    late, ledger = LateSends(960.0, clock), MemoryLedger()
    for n in range(count):
        failed = _failed(f"reply-{n}")
        await ledger.put(failed)
        late.failed(failed, sender)
    clock.now = 961.0
    return late, ledger, clock


async def test_a_failed_read_ends_the_check_and_the_rest_wait_for_the_next() -> None:
    unreadable = SendError(SendFailure.RETRY, "thread read timed out")
    sender = StubSender(found="<sent-1@x>", read_failures=[unreadable])
    late, ledger, _ = await _many(3, sender)

    first = await late.check(ledger, lambda partition: True)
    second = await late.check(ledger, lambda partition: True)

    assert (first, second, len(late)) == (0, 3, 0)
    assert len(sender.reads) == 4


async def test_a_thread_refused_for_good_is_left_and_the_check_goes_on() -> None:
    # a reply a take-over found whose send was rejected (the message gone: 404): its thread
    # read is refused too; the others are still read in the same check
    gone = SendError(SendFailure.REJECTED, "404: no such message", status=404)
    sender = StubSender(found="<sent-1@x>", read_failures=[gone])
    late, ledger, _ = await _many(3, sender)

    settled = await late.check(ledger, lambda partition: True)

    assert (settled, len(late), len(sender.reads)) == (2, 0, 3)


async def test_a_thread_unreadable_every_time_is_given_up_after_its_reads() -> None:
    unreadable = [SendError(SendFailure.RETRY, "timed out") for _ in range(READS)]
    late, ledger, _ = await _many(1, StubSender(found="<sent-1@x>", read_failures=unreadable))

    for _ in range(READS):
        assert await late.check(ledger, lambda partition: True) == 0

    assert len(late) == 0
    assert ledger.writes[-1].state is ReplyState.FAILED


async def test_a_check_reads_at_most_its_share_of_threads() -> None:
    sender = StubSender(found=None)
    late, ledger, _ = await _many(AT_MOST + 5, sender)

    await late.check(ledger, lambda partition: True)

    assert (len(sender.reads), len(late)) == (AT_MOST, 5)


async def test_a_check_after_zero_seconds_keeps_nothing() -> None:
    settled, _, sender, kept = await _checked(after_s=0.0)

    assert (settled, kept, sender.reads) == (0, 0, [])


async def _send_failing(*failures: SendError) -> list[ReplyRecord]:
    """A recorded reply sent by the reply path's send, its attempts failing with
    ``failures``: what the send handed on to be read again later."""
    unsettled: list[ReplyRecord] = []
    dead: list[ReplyRecord] = []

    async def dead_letter(record: ReplyRecord, reason: str, burst: object) -> None:
        dead.append(record)

    parts = SendParts(
        ledger=MemoryLedger(),
        sender=StubSender(*failures),
        dead_letter=dead_letter,
        policy=FAST,
        unsettled=lambda record, sender: unsettled.append(record),
    )
    pending = _failed().with_state(ReplyState.PENDING)
    await parts.ledger.put(pending)
    await send_recorded(pending, False, parts)
    assert [r.state for r in dead] == [ReplyState.FAILED]
    return unsettled


async def test_a_reply_failed_after_timeouts_is_handed_on_to_be_read_again() -> None:
    timeouts = [SendError(SendFailure.RETRY, "timed out") for _ in range(3)]

    unsettled = await _send_failing(*timeouts)

    assert [(r.key, r.state) for r in unsettled] == [("reply-1", ReplyState.FAILED)]


async def test_a_reply_the_mail_api_rejected_is_not_read_again() -> None:
    unsettled = await _send_failing(SendError(SendFailure.REJECTED, "422", status=422))

    assert unsettled == []


def test_a_reply_whose_partition_cannot_be_named_is_not_kept_and_nothing_raises() -> None:
    def outside_a_record(key: bytes) -> int:
        raise TypeError("Cannot modify table key from outside of stream iteration")

    late = LateSends(960.0, Clock(), outside_a_record)

    late.failed(_failed(), StubSender())

    assert len(late) == 0


# -- found again by a take-over -----------------------------------------------------------


def _row(offset: int, record: ReplyRecord) -> tuple[int, bytes, bytes | None]:
    return (offset, record.key.encode(), record.encode())


def test_a_take_over_keeps_a_failed_send_that_is_its_keys_last_word() -> None:
    failed = replace(_failed(), written_at=T0)
    late = LateSends(960.0, Clock(), wall=lambda: T0 + timedelta(seconds=60))

    late.taken(3, [_row(7, failed)], lambda channel: StubSender())

    [kept] = due(late._waiting, 900.0)  # written 60 s before the take-over: due at 900
    assert (kept.record, kept.partition) == (failed, 3)


def test_a_take_over_keeps_no_failed_record_a_later_one_settled_nor_a_writers_failure() -> None:
    sent = replace(_failed(), state=ReplyState.SENT, sent_message_id="<s@x>")
    writer = replace(_failed("reply-2"), reply_text=None)  # the writer's failure: no text
    late = LateSends(960.0, Clock(), wall=lambda: T0)

    late.taken(0, [_row(1, _failed()), _row(2, sent), _row(3, writer)], lambda c: StubSender())

    assert len(late) == 0


def test_a_failed_send_overdue_at_the_take_over_is_due_at_once_and_one_kept_is_kept() -> None:
    clock, failed = Clock(), replace(_failed(), written_at=T0)
    late = LateSends(960.0, clock, wall=lambda: T0 + timedelta(hours=1))
    clock.now = 50.0
    late.failed(_failed("reply-2"), StubSender())

    late.taken(0, [_row(1, failed), _row(2, _failed("reply-2"))], lambda c: StubSender())

    assert [u.record.key for u in due(late._waiting, 50.0)] == ["reply-1"]
    assert len(late) == 1  # reply-2, kept when it failed here, due at 1010 as before


def test_a_take_over_keeps_a_newer_failed_record_over_the_one_kept() -> None:
    # kept here when it failed; a replay elsewhere failed it again: the newer one is checked
    clock = Clock()
    late = LateSends(960.0, clock, wall=lambda: T0)
    late.failed(_failed(), StubSender())
    again = replace(_failed(), attempts=7, written_at=T0)

    late.taken(0, [_row(9, again)], lambda channel: StubSender())

    [kept] = due(late._waiting, 960.0)
    assert kept.record == again


def test_a_take_over_that_cannot_judge_a_record_keeps_nothing_and_raises_nothing() -> None:
    naive = replace(_failed(), written_at=datetime(2026, 12, 7))  # no time zone
    late = LateSends(960.0, Clock(), wall=lambda: T0)

    late.taken(0, [_row(1, naive)], lambda channel: StubSender())

    assert len(late) == 0


class _Store:
    """A ledger partition's store as the take-over recovered it: each key's last record."""

    def __init__(self, *records: ReplyRecord) -> None:
        self.data = {r.key.encode(): r.encode() for r in records}
        self.reads = 0
        self.broken: Exception | None = None  #: raised by a read (a store closed meanwhile)

    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self.reads += 1
        if self.broken is not None:
            raise self.broken
        return iter(sorted((k, v) for k, v in self.data.items() if after is None or k > after))


def _kept_by_store(
    *records: ReplyRecord, rows: Sequence[ReplyRecord] = (), found: str | None = "<sent-1@x>"
) -> tuple[LateSends, MemoryLedger, StubSender, _Store]:
    """A take-over of partition 0 whose rows held ``rows`` (none: the others were older than
    its compaction lag), its store all of ``records``; the take-over an hour after T0."""
    sender, store = StubSender(found=found), _Store(*records)
    late = LateSends(960.0, Clock(), wall=lambda: T0 + timedelta(hours=1), store=store)  # type: ignore[arg-type]
    late.taken(0, [_row(n, r) for n, r in enumerate(rows)], lambda channel: sender)
    return late, MemoryLedger(), sender, store


async def test_a_failed_send_older_than_the_take_overs_rows_is_found_in_the_store() -> None:
    # F49's gap: every owner after the failure died before its check, and the record is
    # older than the last compaction lag the take-over reads
    failed = replace(_failed(), written_at=T0)
    late, ledger, sender, _ = _kept_by_store(failed, _failed("reply-0").with_state(ReplyState.SENT))
    await ledger.put(failed)

    settled = await late.check(ledger, lambda partition: True)

    assert (settled, sender.reads) == (1, ["reply-1"])
    assert ledger.records["reply-1"].state is ReplyState.SENT


async def test_the_store_is_read_a_slice_a_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(late_sends, "SLICE", 2)
    failed = replace(_failed("reply-9"), written_at=T0)  # the last key of three
    others = [replace(_failed(f"reply-{n}"), state=ReplyState.SENT) for n in (1, 2)]
    late, ledger, sender, _ = _kept_by_store(*others, failed)
    await ledger.put(failed)

    first = await late.check(ledger, lambda partition: True)
    second = await late.check(ledger, lambda partition: True)

    assert (first, second, sender.reads, len(late)) == (0, 1, ["reply-9"], 0)


async def test_the_store_of_a_partition_no_longer_owned_is_not_read() -> None:
    failed = replace(_failed(), written_at=T0)
    late, ledger, sender, store = _kept_by_store(failed)
    await ledger.put(failed)

    settled = await late.check(ledger, lambda partition: False)

    assert (settled, store.reads, sender.reads, len(late)) == (0, 0, [], 0)


async def test_a_store_that_cannot_be_read_is_read_again_at_the_next_check() -> None:
    failed = replace(_failed(), written_at=T0)
    late, ledger, sender, store = _kept_by_store(failed)
    await ledger.put(failed)
    store.broken = RuntimeError("the store was closed")

    first = await late.check(ledger, lambda partition: True)
    store.broken = None
    second = await late.check(ledger, lambda partition: True)

    assert (first, second, sender.reads) == (0, 1, ["reply-1"])


async def test_a_failure_checked_once_is_not_kept_again_by_a_later_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # in the take-over's rows and, past the first slice, in its store: read once
    monkeypatch.setattr(late_sends, "SLICE", 2)
    failed = replace(_failed("reply-9"), written_at=T0)
    others = [replace(_failed(f"reply-{n}"), state=ReplyState.SENT) for n in (1, 2)]
    late, ledger, sender, _ = _kept_by_store(*others, failed, rows=[failed], found=None)
    await ledger.put(failed)

    for _ in range(3):
        await late.check(ledger, lambda partition: True)

    assert sender.reads == ["reply-9"]


def test_this_workers_own_failures_are_read_before_a_take_overs() -> None:
    # a backlog of old failures a take-over found waits behind a failure that may still
    # be within the window a late send lands in
    clock = Clock()
    late = LateSends(960.0, clock, wall=lambda: T0 + timedelta(hours=1))
    clock.now = 1500.0
    late.failed(_failed("reply-own"), StubSender())  # due at 2460
    clock.now = 2000.0
    late.taken(0, [_row(1, replace(_failed(), written_at=T0))], lambda c: StubSender())

    first = due(late._waiting, 2500.0, at_most=1)  # reply-1 due at 2000, overdue

    assert [u.record.key for u in first] == ["reply-own"]
    assert [u.record.key for u in due(late._waiting, 2500.0)] == ["reply-1"]


async def test_a_reply_whose_thread_is_being_read_still_counts() -> None:
    # the simulated world waits while the owner holds any (finding F49: it judged the run
    # while the owner's check was reading the thread that showed the email)
    clock, reading, release = Clock(), asyncio.Event(), asyncio.Event()
    late, ledger, sender = LateSends(960.0, clock), MemoryLedger(), StubSender(found="<s@x>")

    async def slow(record: ReplyRecord) -> str | None:
        reading.set()
        await release.wait()
        return "<s@x>"

    sender.find_reply = slow  # type: ignore[method-assign]
    await ledger.put(_failed())
    late.failed(_failed(), sender)
    clock.now = 961.0
    check = asyncio.create_task(late.check(ledger, lambda partition: True))
    await reading.wait()
    during = len(late)
    release.set()

    assert (during, await check, len(late)) == (1, 1, 0)

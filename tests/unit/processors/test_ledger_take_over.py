"""A new owner settles a key again after a late record its last owner did not live to repair
(the simulator's finding F29): a worker past its fence check lands a *pending* record after
the owner settled the key, and stops before it writes the settled record again; the owner
is killed before its audit reads it. The next owner, which wrote none of the records, tells
the late one by when it was made (``arbitration.late_last_words``) and writes the settled
record again after it (``TableLedger.take_over``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from onceonly.processors.reply.arbitration import late_last_words
from onceonly.processors.reply.ledger import TableLedger
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.processors._ledger_log import T0, LogTable, Reads, record

Topic = list[tuple[bytes, bytes]]
Rows = list[tuple[int, bytes, bytes | None]]
#: the new owner's clock: when its repairs are made
NOW = T0 + timedelta(hours=1)


def _at(minute: int, state: ReplyState, key: str = "k", **changes: object) -> ReplyRecord:
    """A record of ``key`` written (made) at minute ``minute``; every reply created at T0."""
    text = None if state is ReplyState.COVERED else f"text {minute}"
    made = record(key, state, text, **changes)
    return made.with_state(state, written_at=T0 + timedelta(minutes=minute))


def _log(*records: ReplyRecord) -> Rows:
    return [(offset, r.key.encode(), r.encode()) for offset, r in enumerate(records)]


SENT = _at(5, ReplyState.SENT, sent_message_id="<r@x>")
COVERED = _at(5, ReplyState.COVERED, covered_by="reply-newer")

# -- the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize("settled", [SENT, COVERED], ids=["sent", "covered"])
@pytest.mark.parametrize(
    "late", [ReplyState.PENDING, ReplyState.FAILED, ReplyState.AWAITING], ids=str
)
def test_a_record_made_before_the_settled_one_it_follows_is_late(
    settled: ReplyRecord, late: ReplyState
) -> None:
    assert late_last_words(_log(settled, _at(1, late))) == [("k", settled)]


def test_a_record_made_after_the_settled_one_it_follows_is_not_late() -> None:
    # a message answered anew after a covered record whose writer never saw it (F21, F25)
    assert late_last_words(_log(COVERED, _at(9, ReplyState.PENDING))) == []


def test_a_key_whose_last_record_is_sent_is_left() -> None:
    assert late_last_words(_log(SENT, _at(1, ReplyState.SENT, sent_message_id="<z@x>"))) == []


def test_a_late_covered_record_after_a_sent_one_is_followed_by_the_sent_one() -> None:
    assert late_last_words(_log(SENT, _at(1, ReplyState.COVERED))) == [("k", SENT)]


def test_a_late_covered_record_after_a_covered_one_is_left() -> None:
    assert late_last_words(_log(COVERED, _at(1, ReplyState.COVERED))) == []


def test_a_sent_record_comes_before_a_later_covered_one_as_the_settled_word() -> None:
    later = _at(7, ReplyState.COVERED)

    assert late_last_words(_log(SENT, later, _at(1, ReplyState.PENDING))) == [("k", SENT)]


def test_the_owners_draft_written_back_after_a_late_covered_record_is_left() -> None:
    # F17: the late writer's covered record was made before the owner's draft
    draft = _at(9, ReplyState.AWAITING)

    assert late_last_words(_log(draft, _at(1, ReplyState.COVERED), draft)) == []


def test_a_late_draft_written_back_after_the_owners_covered_record_is_late() -> None:
    # F28: the draft written back (F17's rule) was the late writer's, made before it
    draft = _at(1, ReplyState.AWAITING)

    assert late_last_words(_log(draft, COVERED, draft)) == [("k", COVERED)]


def test_a_tombstone_ends_what_came_before_it() -> None:
    read = [*_log(SENT), (1, b"k", None), (2, b"k", _at(1, ReplyState.PENDING).encode())]

    assert late_last_words(read) == []


def test_an_approved_drafts_records_are_judged_by_when_each_was_written() -> None:
    # a draft's approval and its sent record keep the draft's created_at: a late writer's
    # approval of the same draft, made before the owner's, shares it too
    draft = _at(0, ReplyState.AWAITING)
    approved = _at(6, ReplyState.PENDING)
    sent = _at(7, ReplyState.SENT, sent_message_id="<r@x>")

    found = late_last_words(_log(draft, approved, sent, _at(3, ReplyState.PENDING)))

    assert found == [("k", sent)]


def test_records_written_before_they_said_when_are_judged_by_their_replys_time() -> None:
    def older(minute: int, state: ReplyState, **changes: object) -> ReplyRecord:
        made = record("k", state, f"text {minute}", **changes)
        return made.with_state(state, created_at=T0 + timedelta(minutes=minute), v=4)

    sent = older(5, ReplyState.SENT, sent_message_id="<r@x>")

    found = late_last_words(_log(sent, older(1, ReplyState.PENDING)))

    assert [(key, r.sent_message_id, r.made_at) for key, r in found] == [
        ("k", "<r@x>", sent.created_at)
    ]


def test_the_owners_draft_is_written_after_a_late_record_made_before_it() -> None:
    # F17's case, with the late writer killed before it wrote the draft back itself
    draft = _at(9, ReplyState.AWAITING)

    assert late_last_words(_log(draft, _at(1, ReplyState.COVERED))) == [("k", draft)]


def test_the_owners_approved_draft_is_written_after_a_late_stale_draft() -> None:
    # F31's case, with the late writer killed before it wrote the approved draft back
    approved = _at(6, ReplyState.PENDING)

    assert late_last_words(_log(approved, _at(3, ReplyState.AWAITING))) == [("k", approved)]


def test_of_the_records_made_after_a_late_one_the_one_made_last_is_written() -> None:
    # two late writers, the older landing last, around the owner's draft
    draft = _at(5, ReplyState.AWAITING)
    read = _log(_at(2, ReplyState.PENDING), draft, _at(1, ReplyState.COVERED))

    assert late_last_words(read) == [("k", draft)]


def test_a_message_answered_anew_after_a_covered_record_is_the_word_written_again() -> None:
    # of the records made after the late one, the one made last, not the settling one
    answered_anew = _at(8, ReplyState.PENDING)
    read = _log(COVERED, answered_anew, _at(1, ReplyState.PENDING))

    assert late_last_words(read) == [("k", answered_anew)]


def test_each_key_is_judged_by_its_own_records() -> None:
    other = _at(0, ReplyState.PENDING, key="other")

    assert late_last_words(_log(SENT, other, _at(1, ReplyState.PENDING))) == [("k", SENT)]


# -- the ledger ---------------------------------------------------------------------------


def _new_owner(topic: Topic) -> tuple[TableLedger, Reads]:
    """A worker that has just recovered ``topic``, every record another's."""
    reads = Reads(topic)
    table = LogTable(topic, len(topic))
    return TableLedger(table, read_log=reads, clock=lambda: NOW), reads  # type: ignore[arg-type]


def _last(topic: Topic) -> ReplyRecord:
    return ReplyRecord.decode([value for key, value in topic if key == b"k"][-1])


async def test_a_take_over_writes_the_settled_record_after_a_late_one() -> None:
    topic: Topic = [(b"k", SENT.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    ledger, _ = _new_owner(topic)

    await ledger.take_over(0, 0, len(topic))

    assert (_last(topic), len(topic)) == (SENT, 3)


async def test_a_take_over_hands_the_rows_it_read_to_on_taken() -> None:
    # late_sends.LateSends.taken finds there the failed sends its last owner left unchecked
    topic: Topic = [(b"k", SENT.encode()), (b"j", _at(2, ReplyState.FAILED, key="j").encode())]
    ledger, _ = _new_owner(topic)
    taken: list[tuple[int, list[tuple[int, bytes, bytes | None]]]] = []
    ledger.on_taken = lambda partition, rows: taken.append((partition, list(rows)))

    await ledger.take_over(0, 1, len(topic))

    assert taken == [(0, [(1, b"j", topic[1][1])])]


async def test_a_take_over_of_a_quiet_partition_hands_on_taken_no_rows() -> None:
    # nothing landed within the lag: the late-send check still reads the partition's store
    topic: Topic = [(b"j", _at(2, ReplyState.FAILED, key="j").encode())]
    ledger, reads = _new_owner(topic)
    taken: list[tuple[int, list[tuple[int, bytes, bytes | None]]]] = []
    ledger.on_taken = lambda partition, rows: taken.append((partition, list(rows)))

    await ledger.take_over(0, len(topic), len(topic))

    assert (taken, reads.calls) == ([(0, [])], [])


async def test_a_take_over_reads_only_the_range_it_is_given() -> None:
    topic: Topic = [(b"k", SENT.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    ledger, reads = _new_owner(topic)

    await ledger.take_over(0, 1, len(topic))

    assert (reads.calls, len(topic)) == ([(0, 1, 1)], 2)


async def test_a_take_over_skips_values_that_are_not_reply_records() -> None:
    topic: Topic = [
        (b"k", SENT.encode()),
        (b"k", _at(1, ReplyState.PENDING).encode()),
        (b"k", b"an effect's record"),
    ]
    ledger, _ = _new_owner(topic)

    await ledger.take_over(0, 0, len(topic))

    assert _last(topic) == SENT


async def test_a_take_overs_repair_keeps_the_time_its_record_was_made() -> None:
    # a repeat made anew would stand as the newest word over the owner's next record,
    # and a late draft written back (F28) would no longer look late
    topic: Topic = [(b"k", SENT.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    ledger, _ = _new_owner(topic)

    await ledger.take_over(0, 0, len(topic))

    assert (_last(topic).written_at, len(topic)) == (SENT.written_at, 3)


async def test_a_take_over_leaves_a_key_this_worker_wrote_since_its_read() -> None:
    topic: Topic = [(b"k", SENT.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    ledger, _ = _new_owner(topic)
    end = len(topic)
    await ledger.put(_at(70, ReplyState.FAILED))  # the lane's record, after the range read

    await ledger.take_over(0, 0, end)

    assert (_last(topic).state, len(topic)) == (ReplyState.FAILED, 3)


async def _take_over_while_a_lane_writes(key: str) -> Topic:
    """A take-over of k's late record, while a lane's write of ``key`` is under way (its
    ack held until the take-over is done)."""
    topic: Topic = [(b"k", SENT.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    ledger, reads = _new_owner(topic)
    table: LogTable = ledger.table  # type: ignore[assignment]
    table.hold = asyncio.Event()
    writes: list[asyncio.Task[None]] = []

    async def read_while_a_lane_writes(partition: int, first: int, last: int) -> object:
        writes.append(asyncio.create_task(ledger.put(_at(70, ReplyState.AWAITING, key=key))))
        await asyncio.sleep(0)  # the lane's write is under way, its ack held
        return await reads(partition, first, last)

    taking = asyncio.ensure_future(ledger.take_over(0, 0, 2, read=read_while_a_lane_writes))  # type: ignore[arg-type]
    while not writes:
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # the take-over has decided each key (its write, if any, held)
    table.hold.set()
    await asyncio.gather(taking, *writes)
    return topic


async def test_a_take_over_leaves_a_key_a_lane_is_writing() -> None:
    # its repair, unfenced, could land after the lane's record, the key's last word
    topic = await _take_over_while_a_lane_writes("k")

    assert ([key for key, _ in topic], _last(topic).state) == ([b"k"] * 3, ReplyState.AWAITING)


async def test_a_take_over_repairs_a_key_while_a_lane_writes_another() -> None:
    # a recovered record's send waits for the take-over (F38): it cannot wait for a quiet
    # partition, which a busy one never is
    topic = await _take_over_while_a_lane_writes("j")

    assert sorted(key for key, _ in topic[2:]) == [b"j", b"k"] and _last(topic) == SENT


def test_stamps_follow_each_other_when_the_clock_stands_still_or_steps_back() -> None:
    times = iter([T0, T0, T0 - timedelta(seconds=5)])
    ledger = TableLedger(LogTable([], 0), clock=lambda: next(times))  # type: ignore[arg-type]

    stamps = [ReplyRecord.decode(ledger._made(SENT)).made_at for _ in range(3)]

    assert stamps == sorted(set(stamps)) and stamps[0] == T0


async def test_a_record_is_made_before_its_fence_check() -> None:
    # a writer paused past its check lands a record made before the rebalance
    times = [T0]

    async def fence(_: str) -> None:
        times.append(T0 + timedelta(minutes=1))

    topic: Topic = []
    ledger = TableLedger(LogTable(topic, 0), fence=fence, clock=lambda: times[-1])  # type: ignore[arg-type]

    await ledger.put(_at(0, ReplyState.SENT, sent_message_id="<r@x>"))

    assert (_last(topic).written_at, len(times)) == (T0, 2)

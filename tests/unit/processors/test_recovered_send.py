"""A *pending* record the worker recovered, not wrote, is sent only after its partition's
take-over read (the simulator's finding F38): the record may be a late one, landed by a
writer past its fence check after the last owner's newer record, which the owner stopped
before it could write its own again. The take-over writes it again, and the send yields
to it. Each partition is taken over once per assignment, by whichever asks first."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from onceonly.processors.exceptions import Fenced, Rebalancing
from onceonly.processors.reply.arbitration import Ruling, recovered_word
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.reply.take_over import TakeOvers
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.processors._ledger_log import T0, LogTable, Reads, record

Topic = list[tuple[bytes, bytes]]


def _at(minute: int, state: ReplyState, text: str | None = None, **changes: object) -> ReplyRecord:
    made = record("k", state, text if text is not None else f"text {minute}", **changes)
    return made.with_state(state, written_at=T0 + timedelta(minutes=minute))


class Tail:
    """The take-over range of the partition: all of ``topic``; each call counted, each
    held while ``hold`` is set and not yet released."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.calls = 0
        self.hold: asyncio.Event | None = None

    async def __call__(self, partition: int) -> tuple[int, int]:
        self.calls += 1
        if self.hold is not None:
            await self.hold.wait()
        return 0, len(self.topic)


def _new_owner(*records: ReplyRecord) -> tuple[TableLedger, Topic, Tail]:
    """A worker that has just recovered ``records`` (another's, in log order)."""
    topic: Topic = [(r.key.encode(), r.encode()) for r in records]
    tail = Tail(topic)
    table = LogTable(topic, len(topic))
    ledger = TableLedger(table, read_log=Reads(topic), tail=tail)  # type: ignore[arg-type]
    return ledger, topic, tail


def _recovered(ledger: TableLedger) -> ReplyRecord:
    found = ledger.get("k")
    assert found is not None
    return found


# -- the send of a recovered record --------------------------------------------------------


async def test_a_recovered_late_pending_record_yields_to_the_owners_newer_text() -> None:
    # F38: a2's pending text (its writer saw m19), then b1's older one, landed late
    ledger, topic, _ = _new_owner(_at(5, ReplyState.PENDING), _at(1, ReplyState.PENDING))

    verdict = await ledger.arbitrate(_recovered(ledger))

    assert (verdict.ruling, verdict.record.reply_text) == (Ruling.ADOPT, "text 5")
    assert ReplyRecord.decode(topic[-1][1]).reply_text == "text 5"  # written again


async def test_a_recovered_late_pending_record_after_the_email_sends_nothing() -> None:
    sent = _at(5, ReplyState.SENT, sent_message_id="<r@x>")
    ledger, _, _ = _new_owner(sent, _at(1, ReplyState.PENDING))

    verdict = await ledger.arbitrate(_recovered(ledger))

    assert (verdict.ruling, verdict.record) == (Ruling.SENT, sent)


async def test_a_recovered_pending_record_that_is_not_late_is_sent_as_it_is() -> None:
    ledger, topic, tail = _new_owner(_at(1, ReplyState.PENDING), _at(5, ReplyState.PENDING))
    own = _recovered(ledger)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, verdict.record, len(topic), tail.calls) == (Ruling.OWN, own, 2, 1)


async def test_a_partition_is_taken_over_once_until_the_partitions_change() -> None:
    ledger, _, tail = _new_owner(_at(1, ReplyState.PENDING))
    own = _recovered(ledger)

    await ledger.arbitrate(own)
    await ledger.arbitrate(own)
    once = tail.calls
    ledger.forget()
    await ledger.arbitrate(own)

    assert (once, tail.calls) == (1, 2)


async def test_a_ledger_with_no_topic_to_read_takes_nothing_over() -> None:
    topic: Topic = [(b"k", _at(1, ReplyState.PENDING).encode())]
    tail = Tail(topic)
    ledger = TableLedger(LogTable(topic, 1), tail=tail)  # type: ignore[arg-type]
    own = _recovered(ledger)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, tail.calls) == (Ruling.OWN, 0)


# -- the take-overs' bookkeeping -----------------------------------------------------------


def _held() -> tuple[TakeOvers, Tail, list[int]]:
    """Take-overs whose range reads wait for the test's ``tail.hold``; the partitions
    taken over, in order."""
    tail = Tail([])
    tail.hold = asyncio.Event()
    taken: list[int] = []

    async def take(partition: int, first: int, end: int) -> None:
        taken.append(partition)

    return TakeOvers(tail, take), tail, taken


async def test_two_askers_at_once_share_one_take_over() -> None:
    take_overs, tail, taken = _held()
    both = asyncio.gather(take_overs.once(3), take_overs.once(3))
    await asyncio.sleep(0)
    tail.hold.set()
    await both

    assert (tail.calls, taken, take_overs.taken(3)) == (1, [3], True)


async def test_a_take_over_begun_before_the_partitions_changed_does_not_count() -> None:
    take_overs, tail, _ = _held()
    begun = asyncio.ensure_future(take_overs.once(0))
    await asyncio.sleep(0)
    take_overs.forget()  # a rebalance while its range was read
    tail.hold.set()
    await begun

    assert not take_overs.taken(0)


# -- the ruling after a take-over ----------------------------------------------------------


def test_the_recovered_record_itself_still_the_word_is_sent() -> None:
    own = _at(1, ReplyState.PENDING)

    assert (recovered_word(own, own).ruling, recovered_word(own, None).ruling) == (
        Ruling.OWN,
        Ruling.OWN,
    )


@pytest.mark.parametrize(
    ("word", "ruling"),
    [
        (_at(5, ReplyState.SENT, sent_message_id="<r@x>"), Ruling.SENT),
        (_at(5, ReplyState.PENDING), Ruling.ADOPT),
        (_at(5, ReplyState.COVERED, "", covered_by="reply-newer"), Ruling.SETTLED),
        (_at(5, ReplyState.AWAITING), Ruling.SETTLED),
        (_at(5, ReplyState.FAILED), Ruling.SETTLED),
    ],
    ids=lambda v: v.value if isinstance(v, Ruling) else v.state.value,
)
def test_a_word_written_again_over_a_recovered_record_decides_its_send(
    word: ReplyRecord, ruling: Ruling
) -> None:
    verdict = recovered_word(_at(1, ReplyState.PENDING), word)

    assert (verdict.ruling, verdict.record) == (ruling, word)


async def test_one_take_over_at_a_time_whatever_the_partition() -> None:
    # each holds a partition's last compaction lag in memory
    running: list[int] = []
    peak = 0

    async def take(partition: int, first: int, end: int) -> None:
        nonlocal peak
        running.append(partition)
        peak = max(peak, len(running))
        await asyncio.sleep(0)
        running.remove(partition)

    take_overs = TakeOvers(Tail([]), take)
    await asyncio.gather(*(take_overs.once(p) for p in range(4)))

    assert (peak, [take_overs.taken(p) for p in range(4)]) == (1, [True] * 4)


async def test_a_take_over_asks_the_fence_before_it_reads() -> None:
    # started just as the partition moved, it reads and writes nothing
    sent = _at(5, ReplyState.SENT, sent_message_id="<r@x>")
    topic: Topic = [(b"k", sent.encode()), (b"k", _at(1, ReplyState.PENDING).encode())]
    reads = Reads(topic)

    async def moved(what: str) -> None:
        raise Fenced(f"{what}: the partition moved")

    ledger = TableLedger(LogTable(topic, 2), fence=moved, read_log=reads)  # type: ignore[arg-type]

    with pytest.raises(Fenced, match="a take-over's read"):
        await ledger.take_over(0, 0, len(topic))

    assert (len(topic), reads.calls) == (2, [])


async def test_an_asker_that_waited_across_a_rebalance_stands_down() -> None:
    # the audit's list of partitions, or a lane, from before the partitions changed
    take_overs, tail, taken = _held()
    first = asyncio.ensure_future(take_overs.once(0))
    await asyncio.sleep(0)  # partition 0's take-over holds the lock
    waiting = asyncio.ensure_future(take_overs.once(1))
    await asyncio.sleep(0)
    take_overs.forget()
    tail.hold.set()
    await first

    with pytest.raises(Rebalancing, match="partition 1's take-over"):
        await waiting
    assert taken == [0]

"""Arbitration in the ledger: the first pending record of a key in the log owns the text;
a sent record before one's own means nothing is sent. Pure parts, then the ledger over
an in-memory table and log where another writer's records land between ours."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from onceonly.processors.reply.arbitration import PartitionLog, Ruling, arbitrate
from onceonly.processors.reply.ledger import TableLedger
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _record(key: str, state: ReplyState, text: str | None = None, **changes: object) -> ReplyRecord:
    return ReplyRecord(key, "inbox", "<m@x>", "inbox:t", state, T0, text, **changes)  # type: ignore[arg-type]


# -- the ruling ---------------------------------------------------------------------------


def test_with_no_other_writer_the_own_record_is_sent() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [])

    assert (verdict.ruling, verdict.record) == (Ruling.OWN, own)


def test_an_earlier_pending_text_of_another_writer_is_adopted() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [(7, _record("k", ReplyState.PENDING, "theirs"))])

    assert verdict.ruling is Ruling.ADOPT
    assert verdict.record.reply_text == "theirs"
    assert verdict.record.state is ReplyState.PENDING


def test_the_first_of_several_earlier_pending_texts_is_adopted() -> None:
    own = _record("k", ReplyState.PENDING, "mine")
    others = [
        (8, _record("k", ReplyState.PENDING, "second")),
        (5, _record("k", ReplyState.PENDING, "first")),
    ]

    assert arbitrate(own, 10, others).record.reply_text == "first"


def test_another_writers_pending_record_after_the_own_one_is_ignored() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [(12, _record("k", ReplyState.PENDING, "theirs"))])

    assert (verdict.ruling, verdict.record.reply_text) == (Ruling.OWN, "mine")


def test_an_earlier_sent_record_means_nothing_is_sent() -> None:
    own = _record("k", ReplyState.PENDING, "mine")
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")

    verdict = arbitrate(own, 10, [(6, _record("k", ReplyState.PENDING, "theirs")), (9, sent)])

    assert (verdict.ruling, verdict.record) == (Ruling.SENT, sent)


def test_the_same_text_first_is_the_own_record() -> None:
    own = _record("k", ReplyState.PENDING, "same")

    verdict = arbitrate(own, 10, [(3, _record("k", ReplyState.PENDING, "same"))])

    assert verdict.ruling is Ruling.OWN


# -- the offsets a worker accounts for -------------------------------------------------------


def test_own_writes_after_the_recovered_end_leave_no_gap() -> None:
    log = PartitionLog(known=100)
    for offset in (100, 101, 102):
        log.wrote(offset)

    assert log.gap(before=102) is None


def test_an_offset_not_written_here_is_a_gap_to_read() -> None:
    log = PartitionLog(known=100)
    log.wrote(100)
    log.wrote(102)  # 101 is another writer's

    assert log.gap(before=102) == (101, 101)


def test_a_read_gap_is_not_read_again_and_its_records_are_kept_by_key() -> None:
    log = PartitionLog(known=100)
    log.wrote(100)
    log.wrote(103)
    theirs = _record("k", ReplyState.PENDING, "theirs")

    log.learn([(101, "k", theirs), (102, "other", None)], last=102)

    assert log.gap(before=103) is None
    assert log.others("k") == [(101, theirs)]
    assert log.others("other") == []


def test_own_records_in_a_read_gap_are_not_taken_for_another_writers() -> None:
    log = PartitionLog(known=100)
    log.wrote(101)  # its report came before 100's was known to be another's

    log.learn(
        [
            (100, "k", _record("k", ReplyState.PENDING, "theirs")),
            (101, "k", _record("k", ReplyState.PENDING, "mine")),
        ],
        last=101,
    )

    assert [text for _, r in log.others("k") for text in [r.reply_text]] == ["theirs"]


@given(
    st.integers(min_value=0, max_value=20),
    st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), min_size=1, max_size=60),
    st.data(),
)
def test_a_check_finds_every_other_writers_record_before_it_and_only_those(
    recovered: int, writes: list[tuple[bool, str]], data: st.DataObject
) -> None:
    # a partition whose first ``recovered`` offsets the store holds, then writes by this
    # worker (True) and another (False) in log order; the worker checks some of its own
    log = PartitionLog(known=recovered)
    theirs: list[tuple[int, str]] = []
    topic: list[tuple[int, str, ReplyRecord]] = []
    for index, (mine, key) in enumerate(writes):
        offset = recovered + index
        topic.append((offset, key, _record(key, ReplyState.PENDING, f"t{offset}")))
        if mine:
            log.wrote(offset)
            if data.draw(st.booleans()):
                _check(log, topic, offset, key, theirs)
        else:
            theirs.append((offset, key))


def _check(
    log: PartitionLog,
    topic: Sequence[tuple[int, str, ReplyRecord]],
    offset: int,
    key: str,
    theirs: Sequence[tuple[int, str]],
) -> None:
    gap = log.gap(offset)
    if gap is not None:
        first, last = gap
        log.learn(((o, k, r) for o, k, r in topic if first <= o <= last), last)
    assert log.gap(offset) is None
    assert [o for o, _ in log.others(key) if o < offset] == [
        o for o, k in theirs if k == key and o < offset
    ]


# -- the ledger over a table and its log ---------------------------------------------------


class LogTable:
    """A table whose changelog is a list shared with other writers (one partition)."""

    def __init__(self, topic: list[tuple[bytes, bytes]], recovered: int) -> None:
        self.topic = topic
        self.store: dict[bytes, bytes] = dict(topic[:recovered])
        self.recovered = recovered

    def get(self, key: bytes) -> bytes | None:
        return self.store.get(key)

    def partition_of(self, key: bytes) -> int:
        return 0

    def applied_offset(self, partition: int) -> int:
        return self.recovered - 1

    async def write_through(self, key: bytes, value: bytes) -> tuple[int, int]:
        self.topic.append((key, value))
        self.store[key] = value
        return 0, len(self.topic) - 1


class Reads:
    def __init__(self, topic: list[tuple[bytes, bytes]]) -> None:
        self.topic = topic
        self.calls: list[tuple[int, int, int]] = []

    async def __call__(
        self, partition: int, first: int, last: int
    ) -> Iterator[tuple[int, bytes, bytes | None]]:
        self.calls.append((partition, first, last))
        return iter([(o, k, v) for o, (k, v) in enumerate(self.topic) if first <= o <= last])


def _ledger(recovered: int = 0) -> tuple[TableLedger, list[tuple[bytes, bytes]], Reads]:
    topic: list[tuple[bytes, bytes]] = [
        (f"old{n}".encode(), _record(f"old{n}", ReplyState.SENT, "x").encode())
        for n in range(recovered)
    ]
    reads = Reads(topic)
    return TableLedger(LogTable(topic, recovered), read_log=reads), topic, reads  # type: ignore[arg-type]


async def test_the_ledger_reads_nothing_when_only_its_own_records_came_first() -> None:
    ledger, _, reads = _ledger(recovered=3)
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_the_ledger_adopts_a_pending_text_another_writer_landed_first() -> None:
    ledger, topic, reads = _ledger(recovered=3)
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))
    topic.append((b"k", _record("k", ReplyState.PENDING, "the zombie's").encode()))
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, verdict.record.reply_text) == (Ruling.ADOPT, "the zombie's")
    assert reads.calls == [(0, 4, 4)]


async def test_the_ledger_finds_a_sent_record_another_writer_landed_first() -> None:
    ledger, topic, _ = _ledger()
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")
    topic.append((b"k", sent.encode()))
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, verdict.record) == (Ruling.SENT, sent)


async def test_a_record_another_writer_landed_after_the_own_is_not_read_for_it() -> None:
    ledger, topic, reads = _ledger()
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)
    topic.append((b"k", _record("k", ReplyState.PENDING, "later").encode()))

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_a_recovered_pending_record_is_its_keys_first() -> None:
    ledger, _, reads = _ledger()
    recovered = _record("k", ReplyState.PENDING, "recovered")

    verdict = await ledger.arbitrate(recovered)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_after_the_partitions_change_the_store_is_the_start_again() -> None:
    ledger, topic, reads = _ledger()
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))
    topic.append((b"z", _record("z", ReplyState.PENDING, "recovered by now").encode()))
    table = ledger.table
    assert isinstance(table, LogTable)
    table.recovered = len(topic)  # the rebalance's recovery read it into the store
    ledger.forget()
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])

"""Batches of records written to a real RocksDB index, then read back: no Kafka."""

from __future__ import annotations

import os
from pathlib import Path

from rocksdict import Options, Rdict

from onceonly.operations.index.answers import drafts, latest, trace_sources
from onceonly.operations.index.layout import DRAFTS_PREFIX, Topic
from onceonly.operations.index.store import READER_OPEN_FILES, IndexStore
from onceonly.operations.index.writes import plan
from onceonly.operations.trace import Record, Sources, assemble, to_json
from onceonly.schemas.ledger import ReplyState
from tests.unit.operations.index.test_keys import _reply
from tests.unit.operations.test_trace import KEY, _delivery, _envelope


def _ledger(offset: int, state: ReplyState | None, key: str = KEY) -> Record:
    value = None if state is None else _reply(state, key).encode()
    return Record(0, offset, 0, key.encode(), value)


def _write(store: IndexStore, topic: Topic, records: list[Record], name: str = "t") -> None:
    store.write(plan(topic, records, store.get), name, 0, records[-1].offset + 1)


def test_the_drafts_waiting_follow_the_ledger_across_batches_and_within_one(
    tmp_path: Path,
) -> None:
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.LEDGER, [_ledger(0, ReplyState.PENDING), _ledger(1, ReplyState.AWAITING)])
    _write(store, Topic.LEDGER, [_ledger(2, ReplyState.AWAITING, "reply-other")])
    assert [r.key for r in drafts(store)] == [KEY, "reply-other"]

    _write(store, Topic.LEDGER, [_ledger(3, ReplyState.SENT)])  # approved and sent
    # awaiting then settled in one batch: the batch's own write is the one before
    _write(
        store,
        Topic.LEDGER,
        [
            _ledger(4, ReplyState.AWAITING, "reply-3"),
            _ledger(5, ReplyState.SENT, "reply-3"),
            _ledger(6, ReplyState.AWAITING, "reply-4"),
            _ledger(7, None, "reply-4"),
        ],
    )

    assert len(list(store.scan(DRAFTS_PREFIX))) == 1  # no entry left behind
    assert [r.key for r in drafts(store)] == ["reply-other"]
    assert latest(store, KEY) is not None and latest(store, KEY).state is ReplyState.SENT  # type: ignore[union-attr]
    assert latest(store, "reply-4") is None
    assert store.offsets("t") == {0: 8}
    store.close()


def test_a_trace_from_the_index_is_the_trace_from_the_whole_topics(tmp_path: Path) -> None:
    envelope, other = _envelope(), _envelope("<m2@example.com>", "evt-2")
    deliveries = [_delivery(envelope, 0), _delivery(other, 1), _delivery(envelope, 2)]
    ledger = [_ledger(0, ReplyState.PENDING), _ledger(1, ReplyState.SENT)]
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.DELIVERIES, deliveries, "d")
    _write(store, Topic.LEDGER, ledger, "l")
    everything = Sources(deliveries=deliveries, ledger=ledger)

    for ident in ("evt-1", envelope.dedupe_key, envelope.message_id or "", KEY):
        from_index = trace_sources(store, ident)
        assert [r.offset for r in from_index.deliveries] == [0, 2]  # the other message's not read
        indexed, scanned = assemble(ident, from_index), assemble(ident, everything)
        assert indexed is not None and scanned is not None
        assert to_json(indexed) == to_json(scanned)
    assert assemble("evt-404", trace_sources(store, "evt-404")) is None
    store.close()


def test_a_reader_sees_what_the_writer_wrote_while_it_runs(tmp_path: Path) -> None:
    writer = IndexStore.writer(tmp_path / "index")
    _write(writer, Topic.LEDGER, [_ledger(0, ReplyState.AWAITING)])
    reader = IndexStore.reader(tmp_path / "index")
    assert [r.key for r in drafts(reader)] == [KEY]
    reader.close()
    writer.close()


def test_a_reply_the_retention_removed_keeps_its_history_in_the_index_marked_removed(
    tmp_path: Path,
) -> None:
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.LEDGER, [_ledger(0, ReplyState.PENDING), _ledger(1, ReplyState.SENT)])
    _write(store, Topic.LEDGER, [_ledger(2, None)])  # the retention sweep's tombstone

    trace = assemble(KEY, trace_sources(store, KEY))

    assert latest(store, KEY) is None  # the reply's state is gone, as in the ledger
    assert trace is not None and trace.answered
    (entry,) = trace.ledger
    assert [c.state for c in entry.history] == [ReplyState.PENDING, ReplyState.SENT]
    assert entry.removed_at is not None
    assert to_json(trace)["ledger"][0]["removed_at"] is not None
    store.close()


def test_a_reply_written_again_after_its_tombstone_is_not_marked_removed(tmp_path: Path) -> None:
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.LEDGER, [_ledger(0, ReplyState.SENT), _ledger(1, None)])
    _write(store, Topic.LEDGER, [_ledger(2, ReplyState.PENDING)])

    trace = assemble(KEY, trace_sources(store, KEY))

    assert trace is not None and trace.ledger[0].removed_at is None
    store.close()


def _open_table_files(path: Path) -> int:
    fds = Path("/proc/self/fd")
    targets = (os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink())
    return sum(1 for t in targets if t.startswith(str(path)) and t.endswith(".sst"))


def test_a_reader_keeps_a_few_table_files_open_whatever_the_index_holds(tmp_path: Path) -> None:
    """Each open table file holds its index blocks in memory: a command that kept every file
    of a 10-million-record index open peaked at 226 MB. A reader reading every entry of an
    index of 40 table files keeps at most READER_OPEN_FILES of them open."""
    path = tmp_path / "index"
    IndexStore.writer(path).close()
    options = Options(raw_mode=True)
    options.set_disable_auto_compactions(True)
    db = Rdict(str(path), options)
    for n in range(40):  # one table file per flush
        db[f"rec\x00{n:04d}".encode()] = b"x" * 100
        db.flush()
    db.close()

    reader = IndexStore.reader(path)
    read = sum(1 for _ in reader.scan(b"rec\x00")) + sum(
        reader.get(f"rec\x00{n:04d}".encode()) is not None for n in range(40)
    )

    assert read == 80
    assert 0 < _open_table_files(path) <= READER_OPEN_FILES < 40
    reader.close()

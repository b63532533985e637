"""Bulk table recovery: which partitions are loaded in bulk, and what a batch writes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from confluent_kafka import Message
from faust.types import TP

from onceonly.processors.runtime.recovery import (
    OFFSET_KEY,
    BulkLoad,
    Span,
    _is_build_offsets,
    bulk_spans,
    write_batch,
)

EVENTS = TP("onceonly-events-changelog", 0)
HOLDS = TP("onceonly-holds-changelog", 0)


def _msg(offset: int, key: bytes, value: bytes | None) -> Any:
    return Message(topic=EVENTS.topic, partition=0, offset=offset, key=key, value=value)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Any]:
    # the options faust's RocksDB store opens a partition with (rocksdict, raw mode)
    opened = rocksdict.Rdict(str(tmp_path / "p0.db"), options=rocksdict.Options(raw_mode=True))
    yield opened
    opened.close()


def test_an_empty_store_loads_the_whole_changelog() -> None:
    assert bulk_spans({EVENTS: -1}, {EVENTS: 49_999}, 10_000) == {EVENTS: Span(0, 49_999)}


def test_a_store_with_state_loads_only_what_follows_its_persisted_offset() -> None:
    assert bulk_spans({EVENTS: 29_999}, {EVENTS: 49_999}, 10_000) == {EVENTS: Span(30_000, 49_999)}


def test_a_partition_less_behind_than_the_threshold_is_left_to_faust() -> None:
    assert bulk_spans({EVENTS: 45_000}, {EVENTS: 49_999}, 10_000) == {}


def test_an_empty_changelog_partition_is_not_loaded() -> None:
    assert bulk_spans({EVENTS: -1, HOLDS: None}, {EVENTS: -1, HOLDS: None}, 1) == {}


def test_a_threshold_of_zero_turns_bulk_loading_off() -> None:
    assert bulk_spans({EVENTS: -1}, {EVENTS: 10**6}, 0) == {}


def test_the_threshold_counts_records_including_both_ends() -> None:
    assert bulk_spans({EVENTS: -1}, {EVENTS: 9_999}, 10_000) == {EVENTS: Span(0, 9_999)}
    assert Span(0, 9_999).records == 10_000


def test_a_batch_writes_the_values_and_the_last_offset_as_persisted(db: Any) -> None:
    last = write_batch(db, [_msg(7, b"k1", b"v1"), _msg(8, b"k2", b"v2")])

    assert last == 8
    assert db[b"k1"] == b"v1" and db[b"k2"] == b"v2"
    assert db[OFFSET_KEY] == b"8"  # faust's persisted offset: str(offset) as bytes


def test_a_tombstone_in_a_batch_deletes_the_key(db: Any) -> None:
    write_batch(db, [_msg(0, b"k1", b"v1"), _msg(1, b"k1", None)])

    assert db.get(b"k1") is None


def test_a_later_record_of_a_key_wins_within_a_batch(db: Any) -> None:
    write_batch(db, [_msg(0, b"k1", b"old"), _msg(1, b"k1", b"new")])

    assert db[b"k1"] == b"new"


def test_an_empty_batch_writes_nothing(db: Any) -> None:
    assert write_batch(db, []) == -1
    assert db.get(OFFSET_KEY) is None


def test_a_load_writes_every_batch_and_follows_the_offset(db: Any) -> None:
    batches = [[_msg(0, b"a", b"1"), _msg(1, b"b", b"2")], [_msg(2, b"c", b"3")]]
    applied = [-1]

    written = BulkLoad(lambda *_: iter(batches)).run(EVENTS.topic, 0, Span(0, 2), db, applied)

    assert written == 3
    assert applied == [2]
    assert [db[k] for k in (b"a", b"b", b"c")] == [b"1", b"2", b"3"]


def test_a_stopped_load_writes_no_batch_after_the_stop(db: Any) -> None:
    second_read = threading.Event()
    release = threading.Event()

    def read(*_: Any) -> Iterator[list[Any]]:
        yield [_msg(0, b"a", b"1")]
        second_read.set()
        release.wait(5)
        yield [_msg(1, b"b", b"2")]

    load = BulkLoad(read)
    applied = [-1]
    thread = threading.Thread(target=load.run, args=(EVENTS.topic, 0, Span(0, 1), db, applied))
    thread.start()
    assert second_read.wait(5)
    load.stop()
    release.set()
    thread.join(5)

    assert db.get(b"b") is None
    assert applied == [0]
    assert db[OFFSET_KEY] == b"0"


def test_only_the_build_offsets_step_is_recognised_as_the_bulk_step() -> None:
    async def _build_offsets() -> None: ...

    async def _build_highwaters() -> None: ...

    ours, theirs = _build_offsets(), _build_highwaters()
    try:
        assert _is_build_offsets(ours)
        assert not _is_build_offsets(theirs)
    finally:
        ours.close()
        theirs.close()

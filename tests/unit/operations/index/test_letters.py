"""The open dead letters, the recent skips and a reply's latest record in the index, and
what the records the index has not read yet change of them: a real RocksDB, no Kafka."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from onceonly.foundation.errors import OnceOnlyError
from onceonly.operations.index.fresh import merge_letters, newest_value
from onceonly.operations.index.layout import OPEN_LETTERS_PREFIX, Topic, offset_key
from onceonly.operations.index.reads import _indexed_letters, newest_skips
from onceonly.operations.index.store import IndexStore
from onceonly.operations.index.writes import plan
from onceonly.operations.replay import DeadLetter, letters_with_outcomes
from onceonly.operations.trace import Record
from onceonly.schemas.decision import Stage
from tests.unit.operations.test_trace import T0, _envelope, _skip


def _letter(offset: int, event: str = "evt-1") -> Record:
    value = {"reason": "the writer failed", "envelopes": [{"event_id": event}]}
    return Record(0, offset, 0, None, json.dumps(value).encode())


def _note(offset: int, *letters: int, at: str = "2026-12-04T08:00:00+00:00") -> Record:
    value = {"v": 1, "kind": "retried", "letters": list(letters), "at": at}
    return Record(0, offset, 0, None, json.dumps(value).encode())


def _write(store: IndexStore, topic: Topic, records: list[Record], name: str = "x") -> None:
    store.write(plan(topic, records, store.get), name, 0, records[-1].offset + 1)


def _state(letters: list[DeadLetter]) -> dict[int, str | None]:
    return {x.offset: x.retried_at for x in letters}


def _parsed(records: list[Record]) -> list[tuple[int, dict[str, Any]]]:
    return [(r.offset, json.loads(r.value or b"")) for r in records]


def test_a_letter_is_open_until_a_retry_note_names_it_across_batches_and_within_one(
    tmp_path: Path,
) -> None:
    records = [_letter(0), _letter(1), _note(2, 0), _letter(3), _letter(4), _note(5, 3, at="t5")]
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.DEAD_LETTERS, records[:3])
    _write(store, Topic.DEAD_LETTERS, records[3:])

    found = _indexed_letters(store, ids=[0])

    # the open ones (1, 4), the one asked for (0, closed) and the newest (4)
    assert {x.offset: x.retried_at for x in found} == {
        1: None,
        4: None,
        0: "2026-12-04T08:00:00+00:00",
    }
    whole = letters_with_outcomes(_parsed(records))  # what a whole read finds
    assert [x.offset for x in whole if x.open] == sorted(x.offset for x in found if x.open)
    store.close()


def test_a_note_written_before_the_letter_it_names_closes_it_as_a_whole_read_does(
    tmp_path: Path,
) -> None:
    store = IndexStore.writer(tmp_path / "index")
    _write(store, Topic.DEAD_LETTERS, [_note(0, 1)])
    _write(store, Topic.DEAD_LETTERS, [_letter(1)])

    assert list(store.scan(OPEN_LETTERS_PREFIX)) == []  # not listed among the open
    assert [x.open for x in _indexed_letters(store, ids=[])] == [False]  # the newest only
    assert [x.open for x in letters_with_outcomes(_parsed([_note(0, 1), _letter(1)]))] == [False]
    store.close()


def test_the_unread_records_add_letters_and_close_the_indexed_ones() -> None:
    indexed = [DeadLetter(1, {"reason": "a"}), DeadLetter(4, {"reason": "b"})]
    unread = _parsed([_letter(7), _note(8, 4, at="t8"), _letter(9), _note(10, 9, at="t10")])

    merged = merge_letters(indexed, unread)

    assert _state(merged) == {1: None, 4: "t8", 7: None, 9: "t10"}
    assert merge_letters(indexed, []) == indexed


def test_a_reply_is_the_last_unread_record_with_its_key_else_the_indexed_one() -> None:
    def rec(offset: int, key: str, value: bytes | None) -> Record:
        return Record(0, offset, 0, key.encode(), value)

    assert newest_value("reply-a", b"indexed", []) == b"indexed"
    assert newest_value("reply-a", b"indexed", [rec(5, "reply-b", b"other")]) == b"indexed"
    unread = [rec(5, "reply-a", b"sent"), rec(6, "reply-b", b"x"), rec(7, "reply-a", b"later")]
    assert newest_value("reply-a", b"indexed", unread) == b"later"
    assert newest_value("reply-a", b"indexed", [*unread, rec(8, "reply-a", None)]) is None
    assert newest_value("reply-a", None, [rec(5, "reply-a", b"new")]) == b"new"


def test_the_recent_skips_are_each_partitions_newest_records_newest_first(
    tmp_path: Path,
) -> None:
    envelope = _envelope()
    store = IndexStore.writer(tmp_path / "index")
    skips = [_skip(envelope, n, Stage.DEDUPE, f"reason-{n}", T0 + n * 1000) for n in range(6)]
    at = [dataclasses.replace(s, offset=n) for n, s in enumerate(skips)]
    _write(store, Topic.DECISIONS, at[:3], "s")
    other = [dataclasses.replace(s, partition=1, offset=n) for n, s in enumerate(at[3:])]
    store.write(plan(Topic.DECISIONS, other, store.get), "s", 1, 3)

    newest = newest_skips(store, [0, 1], limit=2)

    # partition 0's newest two (reason-2, reason-1), partition 1's (reason-5, reason-4)
    assert [s.reason for s in newest] == ["reason-5", "reason-4"]
    assert [s.reason for s in newest_skips(store, [0], limit=2)] == ["reason-2", "reason-1"]
    assert newest_skips(store, [], limit=2) == []
    store.close()


def test_an_index_built_to_another_layout_is_refused_with_how_to_build_it_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index"
    store = IndexStore.writer(path)
    store._db.delete(b"layout")  # as stage 1 left it: offsets, no layout
    store._db[offset_key("t", 0)] = b"5"
    store.close()

    with pytest.raises(OnceOnlyError, match=r"delete .* and run `onceonly index --follow`"):
        IndexStore.writer(path)
    with pytest.raises(OnceOnlyError, match="built by another version of onceonly"):
        IndexStore.reader(path)


def test_from_the_index_a_list_shows_the_open_letters_and_the_one_just_retried() -> None:
    from onceonly.operations.letters import Letters

    letters = [DeadLetter(1, {}), DeadLetter(2, {}, "t2"), DeadLetter(3, {}, "t3")]
    indexed, whole = Letters(letters, "index", complete=False), Letters(letters, "scan", True)

    assert [x.offset for x in indexed.shown()] == [1]
    assert [x.offset for x in indexed.shown(also=3)] == [1, 3]
    assert [x.offset for x in whole.shown()] == [1, 2, 3]


def test_a_new_index_appears_at_its_path_only_with_its_layout_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command checks for CURRENT, then opens the index read-only: had the writer made
    CURRENT before its layout, that command would call a new index another version's."""
    from onceonly.operations.index import store as stores

    path, seen, real = tmp_path / "index", [], stores.Rdict

    class Watched:  # rocksdict's Rdict cannot be subclassed: wrap it
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._db = real(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._db, name)

        def __setitem__(self, key: bytes, value: bytes) -> None:
            if key == b"layout":
                seen.append((path / "CURRENT").exists())
            self._db[key] = value

    monkeypatch.setattr(stores, "Rdict", Watched)
    IndexStore.writer(path).close()

    assert seen and not any(seen)  # the layout was written before CURRENT was at path
    IndexStore.reader(path).close()
    IndexStore.writer(path).close()  # opened again in place, not created again


def test_an_index_directory_holding_other_files_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "index"
    path.mkdir()
    (path / "notes.txt").write_text("mine")

    with pytest.raises(OnceOnlyError, match=r"could not create the index at .*index.*empty"):
        IndexStore.writer(path)
    assert (path / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "index.creating").exists()

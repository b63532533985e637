"""How the worker splits a batch: by partition, then by thread, each one's records in order."""

from __future__ import annotations

from dataclasses import dataclass

from processors.worker import by_partition, by_thread
from schemas.envelope import TICK_HEADER


@dataclass
class _Message:
    partition: int
    offset: int
    key: bytes | None = None
    headers: list[tuple[str, bytes]] | None = None


@dataclass
class _Event:
    message: _Message


def _events(*positions: tuple[int, int]) -> list[_Event]:
    return [_Event(_Message(p, o)) for p, o in positions]


def _positions(groups: list[list[_Event]]) -> list[list[tuple[int, int]]]:
    return [[(e.message.partition, e.message.offset) for e in group] for group in groups]


def test_each_partition_keeps_the_order_its_records_came_in() -> None:
    batch = _events((3, 10), (1, 5), (3, 11), (1, 6), (3, 12))

    assert _positions(by_partition(batch)) == [[(3, 10), (3, 11), (3, 12)], [(1, 5), (1, 6)]]


def test_no_record_is_lost_or_repeated() -> None:
    batch = _events(*((p, o) for o in range(20) for p in (0, 7, 2)))

    split = by_partition(batch)

    assert sorted(e.message.offset for g in split for e in g) == sorted(
        e.message.offset for e in batch
    )
    assert len({id(e) for g in split for e in g}) == len(batch)


def test_an_empty_batch_has_no_groups() -> None:
    assert by_partition([]) == []


def _record(offset: int, key: bytes | None) -> _Event:
    return _Event(_Message(0, offset, key))


def _tick(offset: int) -> _Event:
    return _Event(_Message(0, offset, None, [(TICK_HEADER, b"1")]))


def _offsets(stages: list[list[list[_Event]]]) -> list[list[list[int]]]:
    return [[[e.message.offset for e in thread] for thread in stage] for stage in stages]


def test_each_thread_keeps_its_order_and_threads_share_a_stage() -> None:
    batch = [
        _record(1, b"a"),
        _record(2, b"b"),
        _record(3, b"a"),
        _record(4, b"c"),
        _record(5, b"b"),
    ]

    assert _offsets(by_thread(batch)) == [[[1, 3], [2, 5], [4]]]


def test_a_tick_runs_alone_between_the_records_around_it() -> None:
    batch = [_record(1, b"a"), _record(2, b"b"), _tick(3), _record(4, b"a"), _tick(5)]

    assert _offsets(by_thread(batch)) == [[[1], [2]], [[3]], [[4]], [[5]]]


def test_records_without_a_key_run_in_order_as_one_thread() -> None:
    batch = [_record(1, None), _record(2, b"a"), _record(3, None)]

    assert _offsets(by_thread(batch)) == [[[1, 3], [2]]]

"""How the worker splits a batch: by partition, each partition's records in order."""

from __future__ import annotations

from dataclasses import dataclass

from processors.worker import by_partition


@dataclass
class _Message:
    partition: int
    offset: int


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

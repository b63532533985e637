"""The worker's in-memory index of thread buffers that hold events (for ticks)."""

from __future__ import annotations

import json

from processors import reorder
from processors.holds import Holds

NOW_MS = 1_000_000
WINDOW_MS = 2000


def _buffer(partition: int, *, arrived_ms: int | None, watermark: bool = False) -> bytes:
    buffer = reorder.ThreadBuffer(partition=partition)
    if watermark:
        buffer = reorder.ThreadBuffer(partition=partition, released_up_to=(1, "evt-0"))
    if arrived_ms is not None:
        buffer = reorder.hold(buffer, reorder.Held((2, "evt-1"), arrived_ms, {}))
    return json.dumps(buffer.to_json()).encode()


def _pipeline(holds: dict[bytes, bytes]) -> Holds:
    return Holds(holds, WINDOW_MS)


def test_only_buffers_holding_events_are_indexed() -> None:
    holds = {
        b"t-due": _buffer(2, arrived_ms=NOW_MS - 5000),
        b"t-waiting": _buffer(1, arrived_ms=NOW_MS - 10),
        b"t-watermark": _buffer(5, arrived_ms=None, watermark=True),
    }

    assert _pipeline(holds).index() == {b"t-due": 2, b"t-waiting": 1}


def test_only_partitions_past_their_window_are_due() -> None:
    holds = {
        b"t-due": _buffer(2, arrived_ms=NOW_MS - 5000),
        b"t-waiting": _buffer(1, arrived_ms=NOW_MS - 10),
    }

    assert _pipeline(holds).due_partitions(now_ms=NOW_MS) == {2}


def test_a_rebalance_makes_the_index_read_the_table_again() -> None:
    holds = {b"t-a": _buffer(2, arrived_ms=NOW_MS - 5000)}
    pipeline = _pipeline(holds)
    pipeline.index()
    holds[b"t-recovered"] = _buffer(7, arrived_ms=NOW_MS - 5000)  # a changelog recovered it

    before = dict(pipeline.index())
    pipeline.forget()

    assert before == {b"t-a": 2}
    assert pipeline.index() == {b"t-a": 2, b"t-recovered": 7}
    assert pipeline.due_partitions(now_ms=NOW_MS) == {2, 7}

"""The worker's in-memory index of thread buffers that hold events (for ticks)."""

from __future__ import annotations

import json

from onceonly.processors.reorder import window as reorder
from onceonly.processors.reorder.holds import Delivery, Holds, Verdict, event_key

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


def _delivery(n: int, text: str) -> Delivery:
    import json as _json
    from datetime import UTC, datetime

    from onceonly.ingest import normalise
    from testkit import payloads

    payload = payloads.agentmail_received(thread_id="t-big", event_id=f"evt-{n}", text=text)
    envelope = normalise.agentmail(_json.dumps(payload), {}, datetime.now(UTC))
    return Delivery(envelope, (2, n))


def test_a_buffer_is_never_grown_past_its_size_limit() -> None:
    holds: dict[bytes, bytes] = {}
    store = Holds(holds, WINDOW_MS)
    assert store.hold(_delivery(1, "x" * 2000), now_ms=NOW_MS) is Verdict.HELD
    one = len(holds[event_key(b"agentmail:t-big", "evt-1")])
    store.max_bytes = int(2.5 * one)  # room for two such events, not three

    second = store.hold(_delivery(2, "y" * 2000), now_ms=NOW_MS)
    third = store.hold(_delivery(3, "z" * 2000), now_ms=NOW_MS)

    assert (second, third) == (Verdict.HELD, Verdict.FULL)
    assert sum(len(v) for k, v in holds.items() if k.startswith(b"agentmail:t-big")) <= (
        store.max_bytes
    )
    released = store.take(b"agentmail:t-big", now_ms=NOW_MS + WINDOW_MS)
    assert [d.envelope.event_id for d in released] == ["evt-1", "evt-2"]


def test_a_repeat_of_a_held_event_is_held_once() -> None:
    store = Holds({}, WINDOW_MS)

    assert store.hold(_delivery(1, "hi"), now_ms=NOW_MS) is Verdict.HELD
    assert store.hold(_delivery(1, "hi"), now_ms=NOW_MS) is Verdict.REPEAT


class _CountingTable(dict[bytes, bytes]):
    """A holds table that counts the buffers read from it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.reads: list[bytes] = []

    def get(self, key: bytes, default: object = None) -> object:  # type: ignore[override]
        self.reads.append(key)
        return super().get(key, default)


def test_a_tick_reads_only_the_buffers_past_their_window() -> None:
    # every held buffer of the partition was decoded on each tick: a backlog's bodies
    table = _CountingTable(
        {b"t-due": _buffer(2, arrived_ms=NOW_MS - 5000)}
        | {f"t-wait-{n}".encode(): _buffer(2, arrived_ms=NOW_MS - 10) for n in range(50)}
    )
    holds = Holds(table, WINDOW_MS)
    holds.index()  # read once, as after a rebalance

    due = list(holds.due_keys(2, now_ms=NOW_MS))
    partitions = holds.due_partitions(now_ms=NOW_MS)

    assert (due, partitions) == ([b"t-due"], {2})
    assert table.reads == []  # nothing of it is busy: the index alone decides


def test_a_held_event_makes_its_thread_due_a_window_later() -> None:
    holds = Holds({}, WINDOW_MS)
    assert holds.hold(_delivery(1, "hello"), now_ms=NOW_MS) is Verdict.HELD

    assert holds.due_partitions(now_ms=NOW_MS + WINDOW_MS - 1) == set()
    assert holds.due_partitions(now_ms=NOW_MS + WINDOW_MS) == {2}
    assert list(holds.due_keys(2, now_ms=NOW_MS + WINDOW_MS)) == [b"agentmail:t-big"]


def test_a_thread_whose_held_events_are_all_busy_is_not_due_again() -> None:
    holds = Holds({}, WINDOW_MS)
    holds.hold(_delivery(1, "hello"), now_ms=NOW_MS)
    later = NOW_MS + WINDOW_MS
    taken = holds.take(b"agentmail:t-big", now_ms=later)  # being processed

    assert [d.envelope.event_id for d in taken] == ["evt-1"]
    assert list(holds.due_keys(2, now_ms=later)) == []

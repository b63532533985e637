"""Each held event is an entry of its own in the holds table, the thread's entry keeping its
release watermark: a worker paused past its session whose late write of a whole buffer
landed after the next owner's dropped the events that owner held and had acknowledged (the
simulator's finding F42, seed 1236). Buffers an earlier onceonly wrote whole still work."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from onceonly.foundation.settings import Settings
from onceonly.processors.dedupe.decisions import Retention
from onceonly.processors.dedupe.sweep import Sweeper
from onceonly.processors.reorder import window as reorder
from onceonly.processors.reorder.holds import Holds, Verdict, event_key
from tests.unit.processors.test_held_index import _delivery

NOW_MS = 1_000_000
WINDOW_MS = 2000
THREAD = b"agentmail:t-big"


class _Changelog(dict[bytes, bytes]):
    """A worker's store whose writes are kept, to land on the shared changelog later."""

    def __init__(self, state: dict[bytes, bytes]) -> None:
        super().__init__(state)
        self.sent: list[tuple[bytes, bytes | None]] = []

    def __setitem__(self, key: bytes, value: bytes) -> None:
        super().__setitem__(key, value)
        self.sent.append((key, value))

    def __delitem__(self, key: bytes) -> None:
        super().__delitem__(key)
        self.sent.append((key, None))


def _land(changelog: dict[bytes, bytes], writes: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in writes:
        if value is None:
            changelog.pop(key, None)
        else:
            changelog[key] = value


def _held(holds: Holds) -> list[str]:
    taken = holds.take(THREAD, now_ms=NOW_MS + WINDOW_MS)
    return [d.envelope.event_id for d in taken]


def test_a_paused_owners_late_writes_leave_the_next_owners_held_events() -> None:
    changelog: dict[bytes, bytes] = {}
    zombie = Holds(_Changelog(changelog), WINDOW_MS)
    zombie.hold(_delivery(1, "hi"), now_ms=NOW_MS)  # paused before its writes left
    late = zombie.table.sent  # type: ignore[attr-defined]
    owner = Holds(_Changelog(dict(changelog)), WINDOW_MS)  # recovered without them
    owner.hold(_delivery(1, "hi"), now_ms=NOW_MS)  # the record read again
    owner.hold(_delivery(2, "there"), now_ms=NOW_MS)
    _land(changelog, owner.table.sent)  # type: ignore[attr-defined]

    _land(changelog, late)  # the paused worker resumes: its writes land last

    assert _held(Holds(dict(changelog), WINDOW_MS)) == ["evt-1", "evt-2"]


def test_a_settled_event_leaves_no_entry_and_its_thread_keeps_the_watermark() -> None:
    table: dict[bytes, bytes] = {}
    holds = Holds(table, WINDOW_MS)
    holds.hold(_delivery(1, "hi"), now_ms=NOW_MS)
    taken = holds.take(THREAD, now_ms=NOW_MS + WINDOW_MS)

    holds.settle(THREAD, taken, now_ms=NOW_MS + WINDOW_MS)

    assert list(table) == [THREAD]
    thread = reorder.ThreadBuffer.from_json(json.loads(table[THREAD]))
    assert thread.held == () and thread.released_up_to == taken[0].sort_key
    assert holds.index() == {}


def test_a_buffer_an_earlier_onceonly_wrote_whole_is_released_and_settled() -> None:
    earlier = _delivery(1, "hi")
    item = {"envelope": earlier.envelope.to_json(), "position": list(earlier.position)}
    whole = reorder.ThreadBuffer(held=(reorder.Held(earlier.sort_key, NOW_MS, item),))
    table = {THREAD: json.dumps(whole.to_json()).encode()}
    holds = Holds(table, WINDOW_MS)
    holds.hold(_delivery(2, "there"), now_ms=NOW_MS)

    taken = holds.take(THREAD, now_ms=NOW_MS + WINDOW_MS)
    holds.settle(THREAD, taken, now_ms=NOW_MS + WINDOW_MS)

    assert [d.envelope.event_id for d in taken] == ["evt-1", "evt-2"]
    assert list(table) == [THREAD]
    assert reorder.ThreadBuffer.from_json(json.loads(table[THREAD])).held == ()


def test_the_sweep_leaves_held_events_entries() -> None:
    holds: dict[bytes, bytes] = {}
    Holds(holds, WINDOW_MS).hold(_delivery(1, "hi"), now_ms=0)
    retention = Retention.of(Settings(dedupe_retention=timedelta(days=7)))
    later_s = 30 * 24 * 3600.0  # the thread idle past every retention

    Sweeper(_NoEvents(), holds, retention=retention, clock=lambda: later_s).sweep(2)

    assert event_key(THREAD, "evt-1") in holds


class _NoEvents:
    """An events table with no entries of the partition."""

    def own_entries(self, partition: int, after: bytes | None) -> list[tuple[bytes, bytes]]:
        return []


def test_a_thread_key_with_any_bytes_keeps_its_events_apart_from_other_threads() -> None:
    """A thread id is the provider's text: a zero byte in it names no other thread."""
    table: dict[bytes, bytes] = {}
    holds = Holds(table, WINDOW_MS)
    odd = _delivery(1, "hi")
    thread = odd.envelope.thread_key.encode() + b"\x00evt-2"
    envelope = dataclasses.replace(odd.envelope, thread_key=thread.decode())
    holds.hold(dataclasses.replace(odd, envelope=envelope), now_ms=NOW_MS)
    holds.hold(_delivery(2, "there"), now_ms=NOW_MS)

    again = Holds(table, WINDOW_MS)  # recovered: the index read from the table

    assert again.index() == {thread: 2, THREAD: 2}
    taken = again.take(thread, now_ms=NOW_MS + WINDOW_MS)
    assert [d.envelope.event_id for d in taken] == ["evt-1"]
    again.settle(thread, taken, now_ms=NOW_MS + WINDOW_MS)
    assert [d.envelope.event_id for d in again.take(THREAD, now_ms=NOW_MS + WINDOW_MS)] == ["evt-2"]


def test_a_delivery_of_an_event_an_earlier_onceonly_held_whole_is_a_repeat() -> None:
    earlier = _delivery(1, "hi")
    item = {"envelope": earlier.envelope.to_json(), "position": list(earlier.position)}
    whole = reorder.ThreadBuffer(held=(reorder.Held(earlier.sort_key, NOW_MS, item),))
    table = {THREAD: json.dumps(whole.to_json()).encode()}

    verdict = Holds(table, WINDOW_MS).hold(_delivery(1, "hi"), now_ms=NOW_MS)

    assert verdict is Verdict.REPEAT
    assert list(table) == [THREAD]  # no entry of its own: it is held once

"""Per-thread hold-and-sort, without a broker."""

from __future__ import annotations

from onceonly.processors.reorder import window as reorder
from onceonly.processors.reorder.window import Held, ThreadBuffer, hold, idle, release, ticks_due


def _event(ts: int, event_id: str, arrived: int) -> Held:
    return Held((ts, event_id), arrived, event_id)


def test_nothing_is_released_before_the_window_passes() -> None:
    buffer = hold(ThreadBuffer(), _event(10, "a", arrived=0))

    out, kept = release(buffer, now_ms=1999, window_ms=2000)

    assert out.events == ()
    assert kept == buffer


def test_events_are_released_in_payload_time_order() -> None:
    buffer = ThreadBuffer()
    for event in (_event(30, "c", 0), _event(10, "a", 500), _event(20, "b", 1500)):
        buffer = hold(buffer, event)

    out, _ = release(buffer, now_ms=2000, window_ms=2000)

    assert [h.item for h in out.events] == ["a", "b", "c"]


def test_ties_in_time_are_broken_by_event_id() -> None:
    buffer = hold(hold(ThreadBuffer(), _event(10, "z", 0)), _event(10, "m", 1))

    out, _ = release(buffer, now_ms=2000, window_ms=2000)

    assert [h.item for h in out.events] == ["m", "z"]


def test_an_event_older_than_what_was_released_is_late_but_released() -> None:
    _, after_first = release(
        hold(ThreadBuffer(), _event(50, "new", 0)), now_ms=2000, window_ms=2000
    )

    out, _ = release(hold(after_first, _event(20, "old", 2100)), now_ms=4100, window_ms=2000)

    assert [h.item for h in out.events] == ["old"]
    assert out.late == frozenset({(20, "old")})


def test_a_window_of_zero_releases_at_once() -> None:
    out, kept = release(hold(ThreadBuffer(), _event(1, "a", 100)), now_ms=100, window_ms=0)

    assert [h.item for h in out.events] == ["a"]
    assert kept.held == ()


def test_a_repeat_of_a_held_event_is_held_once() -> None:
    buffer = hold(hold(ThreadBuffer(), _event(1, "a", 0)), _event(1, "a", 5))

    assert len(buffer.held) == 1


def test_a_due_partition_gets_a_tick() -> None:
    assert ticks_due({1, 3}, {}, now=10.0, retick_s=2.0) == [1, 3]


def test_a_partition_with_a_recent_unseen_tick_waits() -> None:
    assert ticks_due({1}, {1: 9.0}, now=10.0, retick_s=2.0) == []


def test_a_tick_unseen_for_too_long_is_sent_again() -> None:
    assert ticks_due({1}, {1: 7.0}, now=10.0, retick_s=2.0) == [1]


def test_an_idle_threads_watermark_expires_after_the_retention() -> None:
    _, emptied = release(hold(ThreadBuffer(partition=2), _event(5, "a", 0)), now_ms=10, window_ms=0)

    assert idle(emptied, partition=2, now_ms=10 + 1001, retention_ms=1000)
    assert not idle(emptied, partition=2, now_ms=10 + 999, retention_ms=1000)
    assert not idle(emptied, partition=3, now_ms=10 + 1001, retention_ms=1000)


def test_a_buffer_still_holding_events_never_expires() -> None:
    buffer = hold(ThreadBuffer(partition=2), _event(5, "a", 0))

    assert not idle(buffer, partition=2, now_ms=10**9, retention_ms=1000)


def test_take_leaves_busy_events_and_the_buffer_alone() -> None:
    buffer = reorder.ThreadBuffer()
    for n, arrived in ((2, 0), (1, 10)):
        buffer = reorder.hold(buffer, reorder.Held((n, f"e{n}"), arrived, n))

    out = reorder.take(buffer, now_ms=2_100, window_ms=2_000, busy=frozenset({(2, "e2")}))

    assert [h.sort_key for h in out.events] == [(1, "e1")]
    assert len(buffer.held) == 2


def test_take_waits_for_the_window_of_the_oldest_event_not_busy() -> None:
    buffer = reorder.hold(reorder.ThreadBuffer(), reorder.Held((1, "e1"), 1_000, 1))

    assert reorder.take(buffer, now_ms=2_999, window_ms=2_000).events == ()
    assert len(reorder.take(buffer, now_ms=3_000, window_ms=2_000).events) == 1


def test_settle_removes_the_done_events_and_raises_the_watermark() -> None:
    buffer = reorder.ThreadBuffer(released_up_to=(1, "e1"))
    for n in (3, 5):
        buffer = reorder.hold(buffer, reorder.Held((n, f"e{n}"), 0, n))

    settled = reorder.settle(buffer, frozenset({(3, "e3")}), now_ms=99)

    assert [h.sort_key for h in settled.held] == [(5, "e5")]
    assert settled.released_up_to == (3, "e3")
    assert settled.updated_ms == 99


def test_settle_never_lowers_the_watermark() -> None:
    buffer = reorder.hold(
        reorder.ThreadBuffer(released_up_to=(9, "e9")), reorder.Held((3, "e3"), 0, 3)
    )

    assert reorder.settle(buffer, frozenset({(3, "e3")}), now_ms=1).released_up_to == (9, "e9")


def test_holding_an_event_marks_the_buffer_changed_at_its_arrival() -> None:
    assert hold(ThreadBuffer(), _event(10, "a", arrived=700)).updated_ms == 700


def test_an_event_equal_to_the_watermark_is_not_late() -> None:
    buffer = hold(ThreadBuffer(released_up_to=(10, "a")), _event(10, "a", 0))

    out, _ = release(buffer, now_ms=0, window_ms=0)

    assert out.late == frozenset()


def test_take_flags_an_event_older_than_the_watermark_as_late() -> None:
    buffer = ThreadBuffer(released_up_to=(10, "b"))
    for event in (_event(5, "a", 0), _event(10, "b", 0), _event(20, "c", 0)):
        buffer = hold(buffer, event)

    assert reorder.take(buffer, now_ms=0, window_ms=0).late == frozenset({(5, "a")})


def test_a_tick_unseen_for_exactly_the_retick_time_is_sent_again() -> None:
    assert ticks_due({1}, {1: 8.0}, now=10.0, retick_s=2.0) == [1]


def test_a_thread_unchanged_for_exactly_the_retention_is_not_idle_yet() -> None:
    assert not idle(
        ThreadBuffer(partition=2, updated_ms=10), partition=2, now_ms=1010, retention_ms=1000
    )

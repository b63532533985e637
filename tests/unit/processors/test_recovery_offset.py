"""Where a table's next recovery starts after an own changelog write (finding F3)."""

from __future__ import annotations

from onceonly.processors.records import applied_after_write


def test_an_own_write_right_after_what_the_store_applied_moves_its_offset() -> None:
    assert applied_after_write(41, 42) == 42
    assert applied_after_write(None, 0) == 0


def test_an_own_write_past_records_the_store_never_read_keeps_its_offset() -> None:
    # a worker paused past its session: the next owner wrote 42-49 meanwhile
    assert applied_after_write(41, 50) == 41
    assert applied_after_write(None, 7) is None


def test_an_offset_held_back_stays_held_for_the_writes_after_it() -> None:
    applied = applied_after_write(41, 50)

    assert applied_after_write(applied, 51) == 41

"""The offset book: a partition is never committed past a record whose work is unfinished."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.processors.offsets import OffsetBook, PartitionOffsets

TP = ("deliveries", 0)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int]]]:
    """Offsets taken in partition order (with gaps, as compaction or markers leave them),
    and an interleaving of takes and finishes in any order a lane's work may end."""
    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=40))
    offsets: list[int] = []
    at = draw(st.integers(min_value=0, max_value=1000))
    for gap in gaps:
        at += gap
        offsets.append(at)
    finish_order = draw(st.permutations(offsets))
    ops: list[tuple[str, int]] = []
    taken, pending = 0, list(finish_order)
    while taken < len(offsets) or pending:
        can_finish = [o for o in pending if o in offsets[:taken]]
        if taken < len(offsets) and (not can_finish or draw(st.booleans())):
            ops.append(("take", offsets[taken]))
            taken += 1
        else:
            choice = draw(st.sampled_from(can_finish))
            pending.remove(choice)
            ops.append(("finish", choice))
    return offsets, ops


@settings(max_examples=300)
@given(runs())
def test_the_commit_point_never_passes_an_unfinished_record(
    run: tuple[list[int], list[tuple[str, int]]],
) -> None:
    _, ops = run
    book = OffsetBook()
    tokens: dict[int, object] = {}
    unfinished: set[int] = set()
    highest = -1
    for op, offset in ops:
        if op == "take":
            tokens[offset] = object()
            book.take(TP, offset, tokens[offset])
            unfinished.add(offset)
            highest = offset
        else:
            assert book.finish(TP, offset, tokens[offset])
            unfinished.discard(offset)
        point = book.committable(TP)
        assert point is not None
        # safety: no unfinished record lies below the commit point
        assert all(point <= o for o in unfinished)
        # progress: the point is the lowest unfinished record, or past everything taken
        assert point == (min(unfinished) if unfinished else highest + 1)


def test_a_record_running_behind_finished_ones_holds_the_commit_point() -> None:
    # faust's own rule committed 13 here: committed 10, 10 running, 11 and 12 done
    part = PartitionOffsets()
    tokens = {o: object() for o in (10, 11, 12)}
    for offset, token in tokens.items():
        part.take(offset, token)
    part.finish(11, tokens[11])
    part.finish(12, tokens[12])

    assert part.committable() == 10
    part.finish(10, tokens[10])
    assert part.committable() == 13


def test_a_stale_copy_finishing_does_not_free_the_copy_read_again() -> None:
    part = PartitionOffsets()
    first, again = object(), object()
    part.take(5, first)
    part.take(5, again)  # read again after a seek; the first copy is still running

    assert part.finish(5, first) is False
    assert part.committable() == 5
    assert part.finish(5, again) is True
    assert part.committable() == 6


def test_a_forgotten_partition_has_nothing_to_commit() -> None:
    book = OffsetBook()
    token = object()
    book.take(TP, 7, token)
    book.forget([TP])

    assert book.committable(TP) is None
    assert book.finish(TP, 7, token) is False
    assert book.in_flight == 0


def test_a_partitions_first_offset_is_the_lowest_taken_since_it_was_assigned() -> None:
    # every record before it was committed before (dedupe's stale claims, finding F37)
    book = OffsetBook()
    for offset in (13, 14):
        book.take(TP, offset, object())
    book.take(TP, 12, object())  # a seek back within the assignment, below the first
    before = book.first(TP)
    book.forget([TP])
    book.take(TP, 20, object())

    assert (before, book.first(TP), book.first(("deliveries", 1))) == (12, 20, None)

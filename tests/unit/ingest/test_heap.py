"""onceonly.ingest.heap: what is alive at start-up is frozen, and young collections run less
often."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from onceonly.ingest import heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_settle_freezes_what_is_alive_and_raises_only_the_young_threshold() -> None:
    alive = [object() for _ in range(10)], {"a": [1]}  # tracked containers, alive now
    _, middle, old = gc.get_threshold()
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, middle, old)
    # frozen: in no generation that a collection walks
    for generation in range(3):
        assert not any(o is alive[1] for o in gc.get_objects(generation))


def test_the_young_threshold_is_above_cpythons_default() -> None:
    assert heap.YOUNG_THRESHOLD > 700

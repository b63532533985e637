"""The step-floors table's arithmetic: µs per operation times operations per reply."""

from __future__ import annotations

import pytest

from bench.step_floors import BATCHED, ONE, ROWS, TIMER, per_reply


def test_a_reply_costs_each_step_times_its_operations_in_its_shape() -> None:
    floors = dict.fromkeys((key for key, *_ in ROWS), 0.0)
    floors |= {"fence": 100.0, "consume1": 50.0, "consume": 10.0, "commit": 1400.0}
    rows, totals = per_reply(floors)
    # a timer commit per 140 replies (both shapes), the shape's consume; 4 fence checks at
    # one at a time only (rounds share them when batched)
    assert totals[ONE] == pytest.approx(1400 * TIMER / 1000 + 0.05 + 0.4)
    assert totals[BATCHED] == pytest.approx(1400 * TIMER / 1000 + 0.01)
    fence = next(row for row in rows if row[0] == "fence check")
    assert fence[2:] == ("100.0", "4", ONE, "0.400")

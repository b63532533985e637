"""A tick's cost over held bodies, measured in the benchmark's own process.

The worker's tick asks :meth:`onceonly.processors.reorder.holds.Holds.due_keys` which threads of a
partition are due. In a backlog every held thread is due at once, so this times one
``due_keys`` over one partition's share of the backlog (at most :data:`MAX_HELD`
threads), all past their window, held with the run's bodies and, as the baseline of the
same run, with 1 KB bodies: if a tick's cost did not grow with the held bodies, the
ratio would be about 1. The table is a dict (RocksDB's read is left out).
"""

from __future__ import annotations

import math
import time

from bench._backlog_figures import Plan, TickCost
from bench._backlog_records import backlog_records

#: Threads held for the measurement, at most (each holds a body in this process).
MAX_HELD = 2000
#: The bodies of the baseline, in KB.
BASELINE_KB = 1


def tick_ms(held: int, body_kb: int, window_ms: int = 2000, repeats: int = 3) -> float:
    """The best of ``repeats`` ``due_keys`` over ``held`` due threads of ``body_kb`` KB."""
    from onceonly.processors.reorder.holds import Delivery, Holds
    from onceonly.schemas.envelope import Envelope

    holds = Holds({}, window_ms, max_bytes=1 << 30)
    for i, (_, value, _) in enumerate(backlog_records(held, "tick", body_kb)):
        holds.hold(Delivery(Envelope.decode(value), (0, i)), now_ms=0)
    best = math.inf
    for _ in range(repeats):
        began = time.perf_counter()
        due = list(holds.due_keys(0, now_ms=window_ms + 1))
        best = min(best, time.perf_counter() - began)
    if len(due) != held:
        raise AssertionError(f"{len(due)} of {held} held threads were due")
    return best * 1000


def measure(plan: Plan) -> TickCost:
    """The tick's cost over one partition's share of ``plan``'s backlog, and its baseline."""
    held = max(1, min(MAX_HELD, math.ceil(plan.threads / plan.partitions)))
    window = plan.window_ms or 2000  # window 0 holds nothing: time the default's ticks
    return TickCost(
        held,
        plan.body_kb,
        tick_ms(held, plan.body_kb, window),
        tick_ms(held, BASELINE_KB, window),
    )

"""A tick's cost over held bodies: one ``Holds.due_keys`` over one partition's share of the
backlog (at most :data:`MAX_HELD` threads, all due), with the run's bodies and with 1 KB
bodies as the baseline; a dict as the table (RocksDB's read left out)."""

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
        held, plan.body_kb, tick_ms(held, plan.body_kb, window), tick_ms(held, BASELINE_KB, window)
    )

"""bench.wake_cost's two ways to let a gap pass: asleep, or spinning on the CPU."""

from __future__ import annotations

import time

from bench.wake_cost import wait


def test_a_spinning_wait_spends_its_gap_on_the_cpu() -> None:
    before = time.thread_time()
    wait(0.05, spin=True)
    # a sleeping wait spends well under 1 ms; a spin spends what the scheduler gives it of
    # the 50 ms, which on a loaded 2-core machine may be less than half
    assert time.thread_time() - before > 0.01


def test_a_sleeping_wait_leaves_the_cpu() -> None:
    started, before = time.perf_counter(), time.thread_time()
    wait(0.05)
    assert time.perf_counter() - started >= 0.05
    assert time.thread_time() - before < 0.02

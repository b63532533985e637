"""bench._procs.CpuWindow beside each process's CPU: how long a main thread waited for a CPU,
and what the host took, read from real processes."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench._procs import CpuWindow

_SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"


@pytest.fixture
def three_spinners_on_one_cpu() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three busy processes sharing one CPU: each is ready to run all the time, runs about
    a third of it and waits for the CPU the other two thirds."""
    cpu = min(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(3)]
    try:
        for spinner in spinners:
            os.sched_setaffinity(spinner.pid, {cpu})
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture
def asleep() -> Iterator[int]:
    """A process asleep all along (its start-up over, said on its stdout, before it is
    measured): never ready to run, so it never waits for a CPU, however loaded the machine."""
    code = "import sys, time\nprint('asleep', flush=True)\ntime.sleep(60)"
    sleeper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"asleep\n"
        yield sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_that_shares_its_cpu_is_seen_waiting_for_it(
    three_spinners_on_one_cpu: list[subprocess.Popen[bytes]], asleep: int
) -> None:
    pids = {f"spinner {i}": s.pid for i, s in enumerate(three_spinners_on_one_cpu)}
    window = CpuWindow({**pids, "asleep": asleep})

    asyncio.run(window.measure(0.2, 1.0))

    # the one CPU, shared three ways: 100 % between them on an idle machine, less when other
    # work runs on that CPU too (48 % in a CI run beside three other jobs), never more
    shares = [window.percent[name] for name in pids]
    assert 20 < sum(shares) < 125, shares
    assert all(abs(share - sum(shares) / 3) < 10 for share in shares), shares
    for name in pids:  # ~67 %: ready all along, on the CPU a third of it
        assert window.waited[name] > 50, window.waited
    # asleep, not waiting for a CPU: none of the window, however loaded the machine (this
    # test's own process, asleep between its reads, waited 99 % of it in a CI run with
    # every job beside it: each wake-up waited its turn)
    assert window.waited["asleep"] < 5, window.waited
    assert not math.isnan(window.steal) and window.steal >= 0

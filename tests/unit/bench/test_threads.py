"""bench._threads: a process's threads grouped by what they are, and their CPU per delivery."""

from __future__ import annotations

import math
import os
import threading

import pytest

from bench._procs import (
    GROUPS,
    parse_schedstat,
    parse_stat,
    per_delivery_us,
    runqueue_wait_seconds,
    thread_group,
    thread_seconds,
)


@pytest.mark.parametrize(
    ("comm", "tid", "group"),
    [
        ("python", 100, "loop"),  # the main thread: its tid is the pid, whatever its name
        ("rdk:main", 101, "rdk:main"),
        ("rdk:broker1", 102, "rdk:broker"),
        ("rdk:broker-1", 103, "rdk:broker"),
        ("asyncio_0", 104, "other"),
        ("python", 105, "other"),
    ],
)
def test_threads_are_grouped_by_their_name_and_the_main_one_by_its_tid(
    comm: str, tid: int, group: str
) -> None:
    assert thread_group(comm, tid, pid=100) == group


def test_a_stat_line_gives_the_name_and_user_plus_system_seconds() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    # a name with a space and a parenthesis, as a thread may have: the last ")" ends it
    fields = ["S"] + ["0"] * 10 + [str(3 * ticks), str(ticks)] + ["0"] * 30
    line = "4242 (rdk:broker (1)) " + " ".join(fields)
    assert parse_stat(line) == ("rdk:broker (1)", 4.0)


def test_per_delivery_sums_each_groups_threads_and_counts_new_and_gone_threads_once() -> None:
    before = {1: ("python", 1.0), 2: ("rdk:broker1", 0.5), 3: ("rdk:broker2", 0.2), 9: ("x", 5.0)}
    after = {
        1: ("python", 1.5),
        2: ("rdk:broker1", 0.6),
        3: ("rdk:broker2", 0.3),
        4: ("rdk:main", 0.1),
    }
    us = per_delivery_us(before, after, pid=1, deliveries=1000)
    assert us["loop"] == pytest.approx(500.0)  # 0.5 s over 1000 deliveries
    assert us["rdk:broker"] == pytest.approx(200.0)  # both broker threads
    assert us["rdk:main"] == pytest.approx(100.0)  # started meanwhile: all it had
    assert us["other"] == 0.0  # thread 9 ended meanwhile: nothing more is known
    assert us["total"] == pytest.approx(800.0)
    assert set(GROUPS) <= us.keys()


def test_no_deliveries_gives_no_figure_rather_than_a_division_by_zero() -> None:
    us = per_delivery_us({1: ("python", 1.0)}, {1: ("python", 2.0)}, pid=1, deliveries=0)
    assert all(math.isnan(v) for v in us.values())


def test_this_process_is_read_with_its_main_thread_and_others() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="sleeper")
    worker.start()
    try:
        seen = thread_seconds(os.getpid())
    finally:
        stop.set()
        worker.join()
    assert os.getpid() in seen
    assert worker.native_id in seen
    assert thread_seconds(2**22 + 1) == {}  # no such process


def test_a_schedstat_line_gives_the_seconds_spent_waiting_for_a_cpu() -> None:
    # nanoseconds on a CPU, nanoseconds ready but waiting, timeslices
    assert parse_schedstat("9000000000 1500000000 4242\n") == pytest.approx(1.5)


def test_no_pid_or_a_gone_process_has_no_wait_rather_than_zero() -> None:
    assert math.isnan(runqueue_wait_seconds(None))
    assert math.isnan(runqueue_wait_seconds(2**22 + 1))

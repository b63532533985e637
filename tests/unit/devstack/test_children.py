"""The local stack's stop budget: every part gets what is left of it, and the children are
asked to stop the moment the stop begins."""

from __future__ import annotations

import signal
import subprocess
import sys

from devstack.children import Stopping, seconds_left, stop_child


def test_each_part_gets_what_is_left_of_the_budget_after_what_stops_later() -> None:
    assert seconds_left(began=100.0, now=101.0, budget_s=9.0, keep_s=2.5) == 5.5
    assert seconds_left(began=100.0, now=101.0, budget_s=9.0) == 8.0
    # the budget spent (a slow ingest): what stops now is killed at once
    assert seconds_left(began=100.0, now=108.0, budget_s=9.0, keep_s=2.5) == 0.0


def test_the_budget_runs_from_the_first_begin_only() -> None:
    now = [50.0]
    stopping = Stopping(9.0, clock=lambda: now[0])
    assert stopping.left(keep_s=2.5) == 6.5  # not begun: all of it

    stopping.begin()
    now[0] = 53.0
    stopping.begin()  # a second Ctrl-C does not restart the clock

    assert stopping.left(keep_s=2.5) == 3.5
    assert stopping.left() == 6.0


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_begin_asks_every_child_to_stop_at_once() -> None:
    stopping = Stopping(9.0)
    children = [sleeper(), sleeper()]
    for child in children:
        stopping.add(child)

    stopping.begin()

    assert [child.wait(10) for child in children] == [-signal.SIGTERM, -signal.SIGTERM]


def test_a_child_that_ignores_sigterm_is_killed_when_its_time_is_up() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"

    assert stop_child(child, timeout_s=0.5) is True
    assert child.returncode == -signal.SIGKILL
    assert stop_child(child) is False  # stopped already: nothing to do

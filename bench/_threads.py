"""CPU time per thread of one process, grouped by what the thread is (the event loop,
librdkafka's threads, other), and a main thread's wait for a CPU, from /proc."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")

#: The groups in the order the reports give them.
GROUPS = ("loop", "rdk:main", "rdk:broker", "other")


def thread_group(comm: str, tid: int, pid: int) -> str:
    """The group of thread ``tid`` of process ``pid`` named ``comm``: ``loop`` for the main
    thread (asyncio's loop runs there), ``rdk:main`` for librdkafka's main thread,
    ``rdk:broker`` for each of its broker threads (one per broker and the internal ones),
    ``other`` for the rest (executors, py-spy's, threads of other libraries)."""
    if tid == pid:
        return "loop"
    if comm == "rdk:main":
        return "rdk:main"
    if comm.startswith("rdk:broker"):
        return "rdk:broker"
    return "other"


def parse_stat(text: str) -> tuple[str, float]:
    """(comm, user + system CPU seconds) of one /proc/<pid>/task/<tid>/stat line."""
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    fields = rest.split()
    return comm, (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def thread_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (comm, CPU seconds so far) of each live thread of ``pid``; {} if it is gone."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out[int(task.name)] = parse_stat((task / "stat").read_text(encoding="ascii"))
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return out


def per_delivery_us(
    before: Mapping[int, tuple[str, float]],
    after: Mapping[int, tuple[str, float]],
    pid: int,
    deliveries: float,
) -> dict[str, float]:
    """µs of CPU per delivery by group (:data:`GROUPS`, all present) between two readings of
    :func:`thread_seconds`, and ``total``. A thread read only once counts what it had then
    (from 0 if it started meanwhile; nothing more if it ended)."""
    spent = dict.fromkeys(GROUPS, 0.0)
    for tid in before.keys() | after.keys():
        comm, end = after.get(tid, before.get(tid, ("", 0.0)))
        start = before[tid][1] if tid in before else 0.0
        spent[thread_group(comm, tid, pid)] += max(0.0, end - start)
    if deliveries <= 0:
        return {**dict.fromkeys(spent, float("nan")), "total": float("nan")}
    us = {group: 1e6 * seconds / deliveries for group, seconds in spent.items()}
    us["total"] = sum(us.values())
    return us


def parse_schedstat(text: str) -> float:
    """Seconds spent waiting on a run queue, from a /proc/<pid>/task/<tid>/schedstat line:
    nanoseconds on a CPU, nanoseconds ready but waiting for one, and timeslices run."""
    return int(text.split()[1]) / 1e9


def runqueue_wait_seconds(pid: int | None) -> float:
    """Seconds the main thread of ``pid`` (a server's event loop) has waited for a CPU so
    far; NaN without a pid, once it is gone, or on a kernel without schedstat."""
    if pid is None:
        return float("nan")
    try:
        return parse_schedstat(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text("ascii"))
    except (OSError, ValueError, IndexError):
        return float("nan")

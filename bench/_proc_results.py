"""The processor benchmark's figures as measured: drain, memory, restart, and the whole run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._proc_takeover import Takeover, marks
from bench._report import fmt_cpu as _cpu
from onceonly.processors.runtime.progress import JOINED, JOINING, READY, STARTING


@dataclass(slots=True)
class Drain:
    """A phase that drained ``count`` records; ``cpu`` in % of one core over the drain."""

    label: str
    count: int
    seconds: float  #: first event to last
    startup_s: float  #: process start to its first event
    cpu: dict[str, float] = field(default_factory=dict)
    process: str = "worker"  #: the key of the process under test in ``cpu``

    @classmethod
    def timed(
        cls,
        label: str,
        count: int,
        times: Mapping[str, Any],
        started: float,
        cpu: dict[str, float],
        process: str = "worker",
    ) -> Drain:
        """The drain whose events ran from ``times["first"]`` to ``times["last"]`` (epoch
        s), of a process started at ``started``."""
        first = times["first"]
        return cls(label, count, times["last"] - first, first - started, cpu, process)

    @property
    def rate(self) -> float:
        return (self.count - 1) / self.seconds if self.seconds > 0 else math.nan

    @property
    def cpu_ms(self) -> float:
        """CPU time of the process under test per event, in ms."""
        share = self.cpu.get(self.process, math.nan) / 100
        return 1000 * share / self.rate if self.rate else math.nan

    def describe(self) -> str:
        start = (
            f"; its first event {self.startup_s:.1f} s after its start"
            if not math.isnan(self.startup_s)
            else ""
        )
        return (
            f"{self.label}: {self.rate:,.0f} events/s ({self.count:,} in {self.seconds:.2f} s, "
            f"{self.cpu_ms:.2f} ms of CPU per event{start}; CPU, % of one core: "
            f"{_cpu(self.cpu)})"
        )


@dataclass(slots=True)
class Memory:
    target: int  #: dedupe entries asked for
    entries: int  #: dedupe entries the worker held when RSS was read
    rss_mb: float
    hwm_mb: float
    drain: Drain | None = None
    growth: list[tuple[int, float]] = field(default_factory=list)  #: (entries, RSS MB)
    budget_s: float = math.nan
    after_restart_mb: float = math.nan

    @property
    def complete(self) -> bool:
        return self.entries >= self.target

    @property
    def extrapolated_mb(self) -> float:
        """RSS at ``target`` entries by a straight line through the second half of the
        growth samples (NaN when the target was reached, or too few samples)."""
        if self.complete:
            return math.nan
        points = [(n, mb) for n, mb in self.growth if n >= self.entries / 2]
        if len(points) < 2 or points[-1][0] == points[0][0]:
            return math.nan
        slope = statistics.linear_regression(*zip(*points, strict=True)).slope
        return self.rss_mb + max(slope, 0.0) * (self.target - self.entries)


@dataclass(slots=True)
class Restart:
    how: str
    entries: int
    first_s: float  #: process start to the new event's reply
    web_s: float  #: process start to /metrics answering
    marks: dict[str, float] = field(default_factory=dict)  #: faust's log lines, s after start
    all_partitions_s: float = math.nan  #: process start to a reply on every partition


@dataclass(slots=True)
class Results:
    events: int
    partitions: int
    plain: Drain | None = None
    worker: Drain | None = None
    ledger_sent: int = 0
    replies_metric: float = math.nan
    replayed: int = 0
    memory: Memory | None = None
    restarts: list[Restart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    sdk_ms: float = math.nan  #: (5) ms of CPU per reply of the SDK call alone
    sdk_httpx_ms: float = math.nan  #: (5b) the same, every request the whole httpx way
    takeovers: list[Takeover] = field(default_factory=list)  #: (6) cold, then standby
    takeover_fill: str = "worker"  #: how (6)'s entries were made

    @property
    def ratio(self) -> float:
        if self.plain is None or self.worker is None or not self.plain.rate:
            return math.nan
        return self.worker.rate / self.plain.rate


#: the worker's progress lines (onceonly.processors.runtime.progress) that mark the steps of its
# start
LOG_MARKS = {
    STARTING: "worker starting (imports done)",
    JOINING: "joining the consumer group",
    JOINED: "joined",
    READY: "ready (tables recovered)",
}


def log_marks(log_path: Path, started: float) -> dict[str, float]:
    """Seconds from ``started`` (wall clock) to the first log line of each LOG_MARKS step."""
    found: dict[str, float] = {}
    for seconds, message, _ in marks(log_path, started, tuple(LOG_MARKS)):
        for needle, name in LOG_MARKS.items():
            if needle in message:
                found.setdefault(name, seconds)
    return found

"""The backlog benchmark's figures, from what it measured to the report: pure functions."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from bench._once import PerMessage
from bench._proc_stack import histogram_quantile
from onceonly.processors.runtime.progress import JOINED, JOINING

#: The worker's peak RSS must stay under this (the issue: "under 1 GB"), in MiB.
RSS_TARGET_MB = 1024.0
FENCE_TO_SEND = "onceonly_fence_to_send_seconds"
#: aiokafka's and faust's lines that tell of a rebalance (they log at WARNING and above in
#: the worker: heartbeat and commit failures, a rejoin, an expired session). The fence's
#: refusals ("partition no longer ours") are not: onceonly_fenced_total counts them
REBALANCE_LINE = re.compile(
    r"rebalanc|re-?join|heartbeat (failed|session expired)|generation id is not|"
    r"unknown member",
    re.IGNORECASE,
)
#: aiokafka lost its group coordinator and looks it up again: no rejoin by itself
COORDINATOR_LOST = re.compile(r"coordinator dead", re.IGNORECASE)
#: mode's warning of a timer whose run took longer than its interval (the event loop, or
#: what the timer waits for, was held up): faust's ``commit``, the worker's ``onceonly.tick``
_OVERLAP = re.compile(r"Timer (?P<name>\S+) is overlapping \(interval=[\d.]+ runtime=(?P<s>[\d.]+)")


@dataclass(frozen=True, slots=True)
class Rebalances:
    """What the worker's log says of its group membership."""

    joins: int  #: "joining the consumer group" lines (one at start-up)
    joined: int  #: "joined the consumer group" lines (one per assignment)
    lines: tuple[str, ...] = ()  #: lines about a rebalance, after the first assignment
    coordinator_lost: int = 0  #: ... about the coordinator lost (and found again)

    @property
    def none(self) -> bool:
        """No rebalance after the first assignment."""
        return self.joins <= 1 and self.joined <= 1 and not self.lines

    def describe(self) -> str:
        text = f"{self.joins} joining, {self.joined} joined, {len(self.lines)} rebalance lines"
        if self.coordinator_lost:
            text += f" ({self.coordinator_lost} coordinator lost and found again)"
        return text


def rebalances(log_text: str) -> Rebalances:
    """Count the joins of a worker's log, and its rebalance lines after the first
    assignment (the start-up's own join may log a coordinator lookup or two)."""
    joins = joined = lost = 0
    found: list[str] = []
    for line in log_text.splitlines():
        if JOINING in line:
            joins += 1
        elif JOINED in line:
            joined += 1
        elif joined and REBALANCE_LINE.search(line):
            found.append(line.strip())
        elif joined and COORDINATOR_LOST.search(line):
            lost += 1
    return Rebalances(joins, joined, tuple(found), lost)


def overlaps(log_text: str) -> dict[str, tuple[int, float]]:
    """Timer name -> (overlap warnings, the longest run in s), from a worker's log."""
    out: dict[str, tuple[int, float]] = {}
    for found in _OVERLAP.finditer(log_text):
        count, longest = out.get(found.group("name"), (0, 0.0))
        out[found.group("name")] = (count + 1, max(longest, float(found.group("s"))))
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Plan:
    """What the run was asked for."""

    threads: int
    body_kb: int
    writer_s: float
    window_ms: int
    concurrency: int
    max_pending: int
    partitions: int

    @property
    def floor_s(self) -> float:
        """The least drain time: every writer slot busy from the start, nothing else."""
        return self.threads * self.writer_s / self.concurrency

    @property
    def floor_rate(self) -> float:
        return self.concurrency / self.writer_s if self.writer_s > 0 else math.nan


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading during the drain."""

    t_s: float  #: seconds after the worker's start
    replies: int
    rss_mb: float
    pending: float = math.nan  #: onceonly_pending_records
    lag: float = math.nan  #: onceonly_consumer_lag, summed over the partitions


@dataclass(frozen=True, slots=True)
class TickCost:
    """One tick's ``Holds.due_keys`` over due threads (``bench._backlog_records``)."""

    held: int  #: due threads in the partition
    body_kb: int
    ms: float  #: with ``body_kb`` bodies (the best of a few)
    baseline_ms: float  #: the same with 1 KB bodies

    @property
    def ratio(self) -> float:
        return self.ms / self.baseline_ms if self.baseline_ms > 0 else math.nan


@dataclass(slots=True)
class Outcome:
    """What the run measured."""

    plan: Plan
    started: float  #: epoch seconds, just before the worker was spawned
    first: float  #: epoch seconds of the first reply at the mail server
    last: float  #: ... of the last
    hwm_mb: float  #: the worker's VmHWM at the end
    peak_rss_mb: float  #: the largest VmRSS sampled
    emails: PerMessage  #: of every thread's message
    rebalances: Rebalances
    fence: list[tuple[float, float]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  #: % of one core, start to last
    produce_s: float = math.nan
    backlog_mb: float = math.nan
    drained: bool = True  #: every thread had its reply before the timeout
    stopped_s: float = math.nan  #: seconds after the start when the readings ended
    #: timer name -> (overlap warnings, longest run in s), from the worker's log
    overlaps: dict[str, tuple[int, float]] = field(default_factory=dict)
    tick: TickCost | None = None
    sends: PerMessage = field(default_factory=lambda: PerMessage({}))  #: reply requests

    @property
    def drain_s(self) -> float:
        return self.last - self.started

    @property
    def first_reply_s(self) -> float:
        return self.first - self.started

    @property
    def reply_rate(self) -> float:
        """Replies/s from the first reply to the last."""
        span = self.last - self.first
        return (self.emails.total - 1) / span if span > 0 else math.nan

    @property
    def drain_rate(self) -> float:
        """Threads answered per second from the worker's start to the last reply."""
        return self.plan.threads / self.drain_s if self.drain_s > 0 else math.nan

    @property
    def peak_mb(self) -> float:
        return max(self.hwm_mb, self.peak_rss_mb)

    def fence_q(self, q: float) -> float:
        return histogram_quantile(q, self.fence)

    @property
    def fenced(self) -> float:
        return self.counters.get("onceonly_fenced_total", math.nan)

    @property
    def writer_calls(self) -> float:
        """Writer (model) calls, every outcome."""
        calls = [v for k, v in self.counters.items() if k.startswith("onceonly_writer_calls_total")]
        return sum(calls) if calls else math.nan

    @property
    def targets_met(self) -> bool:
        return (
            self.drained
            and self.peak_mb < RSS_TARGET_MB
            and self.rebalances.none
            and self.emails.passed
        )

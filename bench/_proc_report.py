"""The processor benchmark's figures as measured (drain, memory, restart, the whole run) and its
report: the figures against their baselines and targets."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._proc_takeover import Takeover, marks
from bench._proc_takeover import describe as describe_takeover
from bench._report import Comparison, Figure, Section, fmt_cpu, met, thin, verdict_table
from onceonly.processors.runtime.progress import JOINED, JOINING, READY, STARTING

TARGET_RATIO = 0.5
TARGET_REPLIES_PER_S = 2000.0
TARGET_RSS_MB = 300.0
#: Calls of the SDK alone, (5).
SDK_CALLS = 2000
#: Stripe events produced at a time in (3): the next batch goes out once half is consumed.
FILL_CHUNK = 20_000


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
            f"{fmt_cpu(self.cpu)})"
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


def _takeover_how(fill: str) -> str:
    """The report's "How" of (6)."""
    return (
        "(6) the worker holding the entries (every partition) is SIGKILLed; a new worker on "
        "an empty data directory (another static member id) starts at once and takes over; a "
        "new AgentMail event is produced on each partition right after the spawn; times from "
        "the kill to the mail server receiving the first and the last of their replies; the "
        "replay rate is the changelog records (highwater + 1 of each active changelog "
        "partition, tombstones and overwritten values included) over the time from the new "
        "owner's `joined` log line to its `tables recovered`. Standby: that worker is "
        "restarted with `ONCEONLY_STANDBY_REPLICAS=1` beside a second one (same setting, "
        "empty data directory); once the second is idle (its standbys caught up) the first "
        "is SIGKILLed and the probes go to the first one's partitions only. " + _FILLS[fill]
    )


#: how (6)'s entries were made, for the report's "How"
_FILLS = {
    "worker": "Its entries were recorded by the worker itself, from distinct Stripe events as "
    "in (3) (`--takeover-fill worker`)",
    "changelog": "Its entries were written straight to the events changelog "
    "(`--takeover-fill changelog`, `bench._proc_records`): two records each, the claim and "
    "the outcome, made by the worker's own `onceonly.processors.dedupe.decisions` functions "
    "in its encoding, "
    "under its keys; the recovery replays them as it replays the worker's own",
}


Row = tuple[str, str, str, str]
HEADERS = ("figure", "measured", "target", "")
#: the instant-writer targets measured a path no user runs; the agent-step benchmark
#: (``bench.agent_step``) replaced them
RETIRED = "retired: see the agent-step benchmark"


def _drain_rows(r: Results) -> list[Row]:
    rows: list[Row] = []
    if r.plain is not None:
        rows.append(("(1) plain faust agent, events/s", f"{r.plain.rate:,.0f}", "", ""))
    if r.worker is not None:
        rows.append(("(2) onceonly worker, replies/s", f"{r.worker.rate:,.0f}", "", ""))
        rows.append(("(2)/(1)", f"{r.ratio:.3f}", f">= {TARGET_RATIO} ({RETIRED})", ""))
        rows.append(
            (
                "replies/s per worker",
                f"{r.worker.rate:,.0f}",
                f">= {TARGET_REPLIES_PER_S:,.0f} ({RETIRED})",
                "",
            )
        )
    return rows


def _memory_rows(r: Results) -> list[Row]:
    m = r.memory
    if m is None:
        return []
    measured = f"{m.rss_mb:.0f} MB ({m.hwm_mb:.0f} MB)"
    if m.complete:
        return [
            (
                f"(3) worker RSS with {m.entries:,} dedupe entries (peak)",
                measured,
                f"< {TARGET_RSS_MB:.0f} MB",
                met(max(m.rss_mb, m.hwm_mb) < TARGET_RSS_MB),
            )
        ]
    return [
        (f"(3) worker RSS with {m.entries:,} dedupe entries, MEASURED (peak)", measured, "", ""),
        (
            f"(3) worker RSS with {m.target:,} entries, EXTRAPOLATED",
            f"{m.extrapolated_mb:.0f} MB",
            f"< {TARGET_RSS_MB:.0f} MB",
            met(m.extrapolated_mb < TARGET_RSS_MB) + " (extrapolated)",
        ),
    ]


#: (6) the issue's targets, from the SIGKILL: first answered, every partition answered
TAKEOVER_TARGETS_S = {"cold": (30.0, 60.0), "standby": (15.0, 15.0)}
#: the entries those targets are set for (at more, the figures stand without a target)
TAKEOVER_TARGET_ENTRIES = 1_000_000


def _target(seconds: float, target: float, entries: int) -> tuple[str, str]:
    if entries > TAKEOVER_TARGET_ENTRIES:
        return "", ""
    return f"<= {target:g} s", met(seconds <= target)


def _takeover_rows(r: Results) -> list[Row]:
    rows: list[Row] = []
    for t in r.takeovers:
        first, every = TAKEOVER_TARGETS_S[t.how]
        what = f"(6) {t.how} takeover, {t.entries:,} entries"
        rows.append(
            (f"{what}: first answered", f"{t.first_s:.2f} s", *_target(t.first_s, first, t.entries))
        )
        rows.append(
            (
                f"{what}: every partition answered",
                f"{t.all_s:.2f} s",
                *_target(t.all_s, every, t.entries),
            )
        )
        if t.how == "cold":
            rows.append((f"{what}: changelog records replayed/s", f"{t.replay_per_s:,.0f}", "", ""))
        rows.append(
            (
                f"{what}: the new owner's RSS (peak)",
                f"{t.rss_mb:.0f} MB ({t.hwm_mb:.0f} MB)",
                "",
                "",
            )
        )
    return rows


def figures(r: Results) -> list[Row]:
    """(figure, measured, target, verdict) rows."""
    rows = _drain_rows(r) + _memory_rows(r) + _takeover_rows(r)
    for s in r.restarts:
        what = f"(4) restart-to-first-event after {s.how}, {s.entries:,} entries"
        rows.append((what, f"{s.first_s:.2f} s", "", ""))
    if not math.isnan(r.sdk_ms):
        ceiling = 1000 / r.sdk_ms
        rows.append(("(5) the SDK call alone, ms of CPU per reply", f"{r.sdk_ms:.2f}", "", ""))
    if not math.isnan(r.sdk_httpx_ms):
        rows.append(
            (
                "(5b) the same, every request the whole httpx way; (5)/(5b)",
                f"{r.sdk_httpx_ms:.2f}",
                f"{r.sdk_ms / r.sdk_httpx_ms:.3f}",
                "",
            )
        )
        rows.append(
            ("(5) one process's ceiling from the SDK alone, replies/s", f"{ceiling:,.0f}", "", "")
        )
    return rows


def summary(r: Results) -> list[str]:
    lines: list[str] = []
    for drain in (r.plain, r.worker):
        if drain is not None:
            lines.append(drain.describe())
    if r.worker is not None:
        lines.append(
            f"checks: {r.ledger_sent:,} replies recorded sent in the ledger topic, "
            f"onceonly_replies_sent_total = {r.replies_metric:,.0f}, "
            f"{r.replayed} replayed sends at the mail server"
        )
    m = r.memory
    if m is not None:
        if m.drain is not None:
            lines.append(m.drain.describe())
        if not m.complete:
            lines.append(
                f"(3) NOT THE FULL {m.target:,} ENTRIES: within the {m.budget_s:g} s budget "
                f"(--rss-budget) the worker recorded {m.entries:,}; the RSS at {m.target:,} is "
                "EXTRAPOLATED along a straight line through the later growth samples below "
                "(RocksDB's caches are bounded, so the line, if anything, overstates it)"
            )
        if m.growth:
            lines.append(
                "(3) RSS while recording (entries → MB): "
                + ", ".join(f"{n:,} → {mb:.0f}" for n, mb in thin(m.growth, 12))
            )
        if not math.isnan(m.after_restart_mb):
            lines.append(
                f"(3) RSS right after the SIGKILL restart with that state = "
                f"{m.after_restart_mb:.0f} MB"
            )
    lines.extend(describe_takeover(t) for t in r.takeovers)
    for s in r.restarts:
        steps = ", ".join(f"{name} {t:.2f} s" for name, t in s.marks.items())
        lines.append(
            f"(4) restart after {s.how} with {s.entries:,} dedupe entries: the new event was "
            f"answered {s.first_s:.2f} s after the new process was spawned ({steps}; "
            f"/metrics answered at {s.web_s:.2f} s); a new event on each of the "
            f"{r.partitions} partitions, produced after that, all answered by "
            f"{s.all_partitions_s:.2f} s"
        )
    return lines


def section(r: Results) -> Section:
    """The processor benchmark's part of the report: the worker as a ratio to the agent."""
    comparison = None
    if r.plain is not None and r.worker is not None:
        comparison = Comparison(
            "events/s",
            Figure("worker", "onceonly worker (replies)", r.worker.rate),
            (Figure("plain", "plain faust agent (counts)", r.plain.rate),),
            {"plain": TARGET_RATIO},
        )
    body = [
        *verdict_table(HEADERS, figures(r)),
        "",
        *(f"- **{line}**" if "NOT THE FULL" in line else f"- {line}" for line in summary(r)),
        *(f"- **{note}**" for note in r.notes),
    ]
    how = [
        f"records: {r.events:,} distinct AgentMail `message.received` envelopes "
        "(~1.5 KB bodies over 1024 threads), made by `onceonly.ingest.normalise.agentmail` and "
        f"produced before (1) and (2) start, on {r.partitions} partitions; (1) and (2) read "
        "the same records, one after the other, each with a consumer group of its own",
        "(1) `bench._plain_faust`: faust App as onceonly's (session 10 s, heartbeat 1 s, "
        "raw codec, `stream_wait_empty`), memory store, no web server, one agent "
        "(concurrency 1) iterating `stream.events()` and counting; rate from its first "
        "event to its last",
        f"(2) `python -m onceonly worker`, `ONCEONLY_REORDER_WINDOW_MS=0`, log level "
        f"{r.log_level}, real `AgentMailSender` (the SDK, its httpx client "
        "`onceonly.processors.mail.agentmail.transport.ApiClient` over aiohttp) against "
        "`bench._instant_mail`, which "
        "answers the reply endpoint at once; rate from the first reply the mail server "
        "received to the last (one reply per record)",
        "(3) the same worker, still running: distinct Stripe `invoice.paid` events (one "
        f"invoice each) produced in batches of {FILL_CHUNK:,} (the next once half the last is "
        "recorded) until the wanted number or the time budget; RSS and peak (VmRSS, VmHWM) "
        "summed over the worker and its children from `/proc/<pid>/status` 3 s after the last "
        'event; progress from `onceonly_skips_total{reason="no_handler"}`',
        "(4) SIGKILL (then SIGTERM) of the worker; a new process on the same data directory "
        "and app id; one new AgentMail event produced right after the spawn; time from the "
        "spawn to the mail server receiving its reply; the steps from the worker's own log "
        "lines. Then one new event on each partition",
        f"(5) `AgentMailSender.reply` {SDK_CALLS:,} times one after the other in the benchmark's "
        "own process (after 50 unmeasured), against the same instant mail server: the "
        "process's CPU time over the calls; no Kafka, no faust",
        _takeover_how(r.takeover_fill),
        "CPU: CPU time over the measured window of the process under test, the mail server, "
        "the Kafka JVM (`broker`), this process (`bench`) and everything else on the machine "
        "(`other`), in % of one core; ms of CPU per event = the process's CPU over the events",
    ]
    return Section("Processors", comparison, body, how)

"""The ingest benchmark's figures as measured: one server's run, and the whole run; the targets,
and the verdict on them with the lines that say so (pure functions of the runs)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bench._load import Sample, percentile
from bench._options import IngestOptions
from bench._report import Figure, fmt_ms, fmt_ratio, met, ratio

T = TypeVar("T")

#: c's CPU per delivery (ingest's process) at most this many times b's (verification alone).
TARGET_CPU_OVER_B = 1.5
#: c's deliveries/s at least this many times d's (the AgentMail article's PostgreSQL design).
TARGET_C_OVER_D = 2.0
#: p99 at half of c's peak, open loop.
TARGET_P99_MS = 20.0
#: The open loops of (c), each at this fraction of its peak; the p99 target is at half,
#: the quarter shows the latency where the server is far from its knee.
OPEN_LOOP_FRACTIONS = (0.25, 0.5)
TARGET_FRACTION = 0.5
_FRACTION_NAMES = {0.25: "a quarter", 0.5: "half"}


def fraction_name(fraction: float) -> str:
    """``half``, ``a quarter``, or the fraction as a percentage."""
    return _FRACTION_NAMES.get(fraction, f"{fraction:.0%}")


def per_delivery_us(percent: float, rate: float) -> float:
    """CPU microseconds per delivery from a CPU share (% of one core) at ``rate`` per second;
    NaN when either is missing or the rate is not positive."""
    if math.isnan(percent) or math.isnan(rate) or rate <= 0:
        return math.nan
    return percent / 100 / rate * 1e6


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """(c) at a fixed rate, ``fraction`` of its peak: the figures and each process's CPU;
    ``steal``: % of one core the host took from this machine meanwhile; ``waited``: % of
    the time ingest's event loop was ready to run but waited for a CPU."""

    fraction: float
    rate: float
    sample: Sample
    cpu: dict[str, float]
    steal: float = math.nan
    waited: float = math.nan

    @property
    def p99_ms(self) -> float:
        return self.sample.percentile_ms(0.99)


def upper_median(items: Sequence[T], key: Callable[[T], float]) -> T:
    """The item of median ``key``; of an even number, the one of the middle two with the
    larger key: the slower p99 of two open loops (a good and a bad run are judged on the
    bad one), the faster of two peaks."""
    return sorted(items, key=key)[len(items) // 2]


@dataclass(slots=True)
class Run:
    """One server's figures. ``cpu``: % of one core of each process during the peak;
    ``parts``: the processes whose CPU is the server's work (itself, and PostgreSQL or
    the broker where it uses them)."""

    key: str
    label: str
    peak: Sample
    cpu: dict[str, float]
    parts: tuple[str, ...] = ("server",)
    open_loops: list[OpenLoop] = field(default_factory=list)
    #: wrk's connections at the peak, and the deliveries/s at each count tried
    connections: int = 0
    tried: dict[int, float] = field(default_factory=dict)

    def open_loops_at(self, fraction: float) -> list[OpenLoop]:
        """The open loops run at ``fraction`` of the peak, in the order they ran."""
        return [ol for ol in self.open_loops if ol.fraction == fraction]

    def figure(self) -> Figure:
        return Figure(
            self.key,
            self.label,
            self.peak.rate,
            self.peak.percentile_ms(0.5),
            self.peak.percentile_ms(0.99),
        )

    def us(self, process: str) -> float:
        """CPU µs per delivery of ``process`` at the peak; NaN if it was not measured."""
        return per_delivery_us(self.cpu.get(process, math.nan), self.peak.rate)


def fastest(runs: Sequence[Run]) -> Run:
    """Of one server's closed loops at several counts of connections, the one of most
    deliveries/s, with the deliveries/s of each count in :attr:`Run.tried`, and the failed
    answers of the others added to its own: any failure makes the benchmark run invalid."""
    best = max(runs, key=lambda run: run.peak.rate)
    best.tried = {run.connections: run.peak.rate for run in runs}
    for run in runs:
        if run is not best:
            for status, count in run.peak.statuses.items():
                if status != run.peak.ok_status:
                    best.peak.statuses[status] += count
    return best


def rotated(keys: list[str], by: int) -> list[str]:
    """``keys`` started ``by`` places later, wrapping round: each round runs the servers in
    another order, so that none is always first after a quiet broker or always last. (In
    one check, the third of three identical ingests run in turn was the fastest in each of
    three rounds, by 4-18 %: the order itself moves the figures.)"""
    shift = by % len(keys) if keys else 0
    return keys[shift:] + keys[:shift]


@dataclass(slots=True)
class Results:
    """What one run of the ingest benchmark measured, and on what. ``runs``: each server's
    run of median peak over the rounds, c's with its open loops; ``rounds``: every round's
    runs, in the order they ran."""

    opts: IngestOptions
    partitions: int
    runs: list[Run]
    postgres: str = "not started"  #: the database of (d), for the report
    rounds: list[list[Run]] = field(default_factory=list)

    def choose_medians(self) -> None:
        """:attr:`runs` from :attr:`rounds`: each server's run of median deliveries/s
        (:func:`upper_median`), in the order of the first round."""
        keys = [run.key for run in self.rounds[0]] if self.rounds else []
        self.runs = [
            upper_median(
                [run for rnd in self.rounds for run in rnd if run.key == key],
                key=lambda run: run.peak.rate,
            )
            for key in keys
        ]


@dataclass(frozen=True, slots=True)
class Verdict:
    c_us: float  #: ingest's CPU per delivery at c's peak (its whole process)
    b_us: float  #: the verifying server's at b's peak
    c_over_a: float
    c_over_b: float
    c_over_d: float
    half_p99_ms: float
    half_rate: float
    half_lag_p99_ms: float
    half_queued_p99_ms: float  #: how late the generator itself queued them
    failed: int
    #: of each run at half of the peak, in order: p99, the host's steal (% of a core) and
    #: how long ingest's loop waited for a CPU (% of the time); the figures above are the
    #: median run's
    half_p99s: tuple[float, ...] = ()
    half_steal: tuple[float, ...] = ()
    half_waited: tuple[float, ...] = ()

    @property
    def cpu_over_b(self) -> float:
        return ratio(self.c_us, self.b_us)

    @property
    def cpu_met(self) -> bool:
        return self.cpu_over_b <= TARGET_CPU_OVER_B  # NaN compares False: not met

    @property
    def throughput_met(self) -> bool:
        return self.c_over_d >= TARGET_C_OVER_D

    @property
    def latency_met(self) -> bool:
        return self.half_p99_ms < TARGET_P99_MS


def verdict(runs: list[Run]) -> Verdict:
    by = {run.key: run for run in runs}
    c = by["c"]

    def over(key: str) -> float:
        return ratio(c.peak.rate, by[key].peak.rate) if key in by else math.nan

    half_runs = c.open_loops_at(TARGET_FRACTION)
    half = upper_median(half_runs, key=lambda ol: ol.p99_ms) if half_runs else None
    failed = sum(run.peak.failed + sum(ol.sample.failed for ol in run.open_loops) for run in runs)
    return Verdict(
        c_us=c.us("server"),
        b_us=by["b"].us("server") if "b" in by else math.nan,
        c_over_a=over("a"),
        c_over_b=over("b"),
        c_over_d=over("d"),
        half_p99_ms=half.sample.percentile_ms(0.99) if half else math.nan,
        half_rate=half.rate if half else math.nan,
        half_lag_p99_ms=percentile(half.sample.send_lag, 0.99) * 1000 if half else math.nan,
        half_queued_p99_ms=percentile(half.sample.dispatch_lag, 0.99) * 1000 if half else math.nan,
        failed=failed,
        half_p99s=tuple(ol.p99_ms for ol in half_runs),
        half_steal=tuple(ol.steal for ol in half_runs),
        half_waited=tuple(ol.waited for ol in half_runs),
    )


def fmt_us(value: float) -> str:
    return "" if math.isnan(value) else f"{value:,.0f}"


def summary_lines(v: Verdict) -> list[str]:
    """The three targets, each with met or NOT met."""
    return [
        f"c's CPU per delivery = {fmt_us(v.c_us) or 'n/a'} µs (ingest's process, librdkafka's "
        f"threads included) = {fmt_ratio(v.cpu_over_b)} x b's {fmt_us(v.b_us) or 'n/a'} µs "
        f"(target ≤ {TARGET_CPU_OVER_B:g} x: {met(v.cpu_met)})",
        f"c/d = {fmt_ratio(v.c_over_d)} in deliveries/s "
        f"(target ≥ {TARGET_C_OVER_D:g}: {met(v.throughput_met)})",
        _target_line(v),
        f"c/a = {fmt_ratio(v.c_over_a)}, c/b = {fmt_ratio(v.c_over_b)} in deliveries/s: no "
        "targets, since the broker and the load generator share this machine's cores with c",
    ]


def _target_line(v: Verdict) -> str:
    """The latency target: the median run's p99 and lags, every run's p99, and what the
    machine took from each run (steal, the loop's wait for a CPU) where it was read."""
    several = len(v.half_p99s) > 1
    runs = (
        f", the median of {len(v.half_p99s)} runs ({', '.join(map(fmt_ms, v.half_p99s))} ms)"
        if several
        else ""
    )
    line = (
        f"p99 at half of c's peak ({v.half_rate:,.0f}/s) = {fmt_ms(v.half_p99_ms)} ms{runs} "
        f"(target < {TARGET_P99_MS:g} ms: {met(v.latency_met)}); "
        f"{'in that run ' if several else ''}the generator queued those requests up to "
        f"{fmt_ms(v.half_queued_p99_ms)} ms after their scheduled time (p99) and, waiting "
        f"for a free connection, sent them up to {fmt_ms(v.half_lag_p99_ms)} ms after it; "
        "the latency includes both"
    )
    if all(math.isnan(x) for x in v.half_steal + v.half_waited):
        return line
    each = " run by run" if several else ""
    return (
        f"{line}. Meanwhile the host took {_percents(v.half_steal)}% of a core (steal) and "
        f"ingest's event loop, ready to run, waited for a CPU {_percents(v.half_waited)}% of "
        f"the time{each}"
    )


def _percents(values: tuple[float, ...]) -> str:
    return ", ".join("n/a" if math.isnan(x) else f"{x:.1f}" for x in values)

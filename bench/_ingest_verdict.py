"""The ingest benchmark's verdict: its figures against the targets, and the lines that say so.

:func:`verdict` and :func:`summary_lines` are pure functions of the runs, tested without
running anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench._ingest_results import (
    TARGET_C_OVER_D,
    TARGET_CPU_OVER_B,
    TARGET_FRACTION,
    TARGET_P99_MS,
    Run,
    upper_median,
)
from bench._load import percentile
from bench._report import fmt_ms, fmt_ratio, met, ratio


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

"""The ingest benchmark's report: the verdict against the targets, the rows, the notes.

Every figure here comes from pure functions of the runs (:func:`verdict`, :func:`rows`,
:func:`summary_lines`, :func:`latency_lines`, :func:`scaling_lines`), so that the report
is tested without running anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich import box
from rich.table import Table

from bench._ingest_results import (
    OPEN_LOOP_FRACTIONS,
    TARGET_C_OVER_D,
    TARGET_CPU_OVER_B,
    TARGET_FRACTION,
    TARGET_P99_MS,
    Results,
    Run,
    fraction_name,
    per_delivery_us,
)
from bench._load import Sample, percentile
from bench._procs import console
from bench._report import (
    CONTENDED_PERCENT,
    Comparison,
    Section,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    met,
    ratio,
)
from bench._wrk import measured_run_s

# --------------------------------------------------------------------------- the verdict


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

    half = c.open_loop(TARGET_FRACTION)
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
    )


# --------------------------------------------------------------------------- the table

HEADERS = (
    "server",
    "deliveries/s",
    "p50 ms",
    "p99 ms",
    "failed",
    "server µs",
    "postgres µs",
    "broker µs",
    "total µs",
    "load µs",
    "server %",
    "other %",
)
#: What the CPU columns are, under the table.
LEGEND = (
    "µs: CPU per delivery of each process (user + system, all threads): the server with "
    "its descendants, PostgreSQL with its backends, the Kafka broker; total: the server's "
    "own processes (the server, and PostgreSQL for (d), the broker for (c), (c2), (m)); "
    "load: the load generator, apart (wrk; bench/openloop, Go, in the open loop). "
    "%: of one core, the server's, and the rest of the machine's (other processes, kernel "
    "work not charged to ours)"
)
#: Columns of text, left-aligned; the rest are figures.
TEXT_COLUMNS = frozenset({0})


def fmt_us(value: float) -> str:
    return "" if math.isnan(value) else f"{value:,.0f}"


def fmt_percent(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.0f}"


def _cells(
    name: str, sample: Sample, cpu: dict[str, float], parts: tuple[str, ...]
) -> tuple[str, ...]:
    def us(process: str) -> float:
        return per_delivery_us(cpu.get(process, math.nan), sample.rate)

    total = math.fsum(us(part) for part in parts)
    return (
        name,
        fmt_rate(sample.rate),
        fmt_ms(sample.percentile_ms(0.5)),
        fmt_ms(sample.percentile_ms(0.99)),
        str(sample.failed),
        fmt_us(us("server")),
        fmt_us(us("postgres")),
        fmt_us(us("broker")),
        fmt_us(total),
        fmt_us(us("load")),
        fmt_percent(cpu.get("server", math.nan)),
        fmt_percent(cpu.get("other", math.nan)),
    )


def rows(runs: list[Run]) -> list[tuple[str, ...]]:
    """One row per measured phase: its figures, and the CPU µs per delivery of each process
    (the server's total counts only its own processes; the load generator stands apart)."""
    out = []
    for run in runs:
        out.append(_cells(run.label, run.peak, run.cpu, run.parts))
        for ol in run.open_loops:
            name = f"({run.key}) {fraction_name(ol.fraction)} of peak, open loop"
            out.append(_cells(name, ol.sample, ol.cpu, run.parts))
    return out


# --------------------------------------------------------------------------- what it says


def summary_lines(v: Verdict) -> list[str]:
    """The three targets, each with met or NOT met."""
    return [
        f"c's CPU per delivery = {fmt_us(v.c_us) or 'n/a'} µs (ingest's process, librdkafka's "
        f"threads included) = {fmt_ratio(v.cpu_over_b)} x b's {fmt_us(v.b_us) or 'n/a'} µs "
        f"(target ≤ {TARGET_CPU_OVER_B:g} x: {met(v.cpu_met)})",
        f"c/d = {fmt_ratio(v.c_over_d)} in deliveries/s "
        f"(target ≥ {TARGET_C_OVER_D:g}: {met(v.throughput_met)})",
        f"p99 at half of c's peak ({v.half_rate:,.0f}/s) = {fmt_ms(v.half_p99_ms)} ms "
        f"(target < {TARGET_P99_MS:g} ms: {met(v.latency_met)}); the generator queued "
        f"those requests up to {fmt_ms(v.half_queued_p99_ms)} ms after their scheduled time "
        f"(p99) and, waiting for a free connection, sent them up to "
        f"{fmt_ms(v.half_lag_p99_ms)} ms after it; the latency includes both",
        f"c/a = {fmt_ratio(v.c_over_a)}, c/b = {fmt_ratio(v.c_over_b)} in deliveries/s: no "
        "targets, since the broker and the load generator share this machine's cores with c",
    ]


def latency_lines(runs: list[Run]) -> list[str]:
    """c's open loops other than the target's: where its latency stands further from
    its peak."""
    c = next((run for run in runs if run.key == "c"), None)
    if c is None:
        return []
    return [
        f"at {fraction_name(ol.fraction)} of c's peak ({fmt_rate(ol.rate)}/s): p50 "
        f"{fmt_ms(ol.sample.percentile_ms(0.5))} ms, p99 {fmt_ms(ol.sample.percentile_ms(0.99))}"
        f" ms (no target); the generator queued them up to "
        f"{fmt_ms(percentile(ol.sample.dispatch_lag, 0.99) * 1000)} ms late and sent them up "
        f"to {fmt_ms(percentile(ol.sample.send_lag, 0.99) * 1000)} ms late (p99)"
        for ol in c.open_loops
        if ol.fraction != TARGET_FRACTION
    ]


#: Cores of the example machines of the projection.
PROJECTED_CORES = (8, 16)


def scaling_lines(runs: list[Run]) -> list[str]:
    """c2 beside c, and what a machine with more cores would give at c's CPU per delivery."""
    by = {run.key: run for run in runs}
    if "c" not in by:
        return []
    c = by["c"]
    lines = []
    if "c2" in by:
        c2 = by["c2"]
        lines.append(
            f"c2 (ONCEONLY_INGEST_PROCESSES=2) = {fmt_rate(c2.peak.rate)} deliveries/s, "
            f"{fmt_ratio(ratio(c2.peak.rate, c.peak.rate))} x c's {fmt_rate(c.peak.rate)}; "
            f"ingest's CPU per delivery {fmt_us(c2.us('server')) or 'n/a'} µs (the parent and "
            f"both children) against c's {fmt_us(c.us('server')) or 'n/a'} µs, at "
            f"{fmt_percent(c2.cpu.get('server', math.nan)) or 'n/a'}% of a core against "
            f"{fmt_percent(c.cpu.get('server', math.nan)) or 'n/a'}%"
        )
    ingest, broker = c.us("server"), c.us("broker")
    if math.isnan(ingest) or ingest <= 0:
        return lines
    per_core = 1e6 / ingest
    machines = ", ".join(f"{fmt_rate(n * per_core)}/s on {n} cores" for n in PROJECTED_CORES)
    shared = (
        ""
        if math.isnan(broker)
        else f"; with the broker on the same machine, ingest + broker take "
        f"{fmt_us(ingest + broker)} µs per delivery: {fmt_rate(1e6 / (ingest + broker))}/s "
        "per core"
    )
    lines.append(
        f"more cores, from c's CPU per delivery: ingest's {fmt_us(ingest)} µs give "
        f"{fmt_rate(per_core)} deliveries/s per core given to an ingest process "
        f"(ONCEONLY_INGEST_PROCESSES=auto runs one per core){shared}. In production the "
        "broker's share is spent on the brokers' own machines and the senders' on theirs, so "
        f"an ingest host would give about {machines}, as long as each process has a core of "
        "its own"
    )
    return lines


def contention(runs: list[Run]) -> str | None:
    """A warning when the rest of the machine took CPU while a figure was measured."""
    windows = [run.cpu for run in runs] + [ol.cpu for run in runs for ol in run.open_loops]
    worst = max((cpu.get("other", 0.0) for cpu in windows), default=0.0)
    if worst < CONTENDED_PERCENT:
        return None
    return (
        f"other work on this machine took up to {worst:.0f}% of a core while figures were "
        "measured (column `other`): the figures are lower and noisier than on an idle machine"
    )


#: Load generator CPU, in % of one core, from which it may be what limits a peak.
GENERATOR_BOUND_PERCENT = 85.0


def generator_bound(runs: list[Run]) -> str | None:
    """A note when the load generator, not the server, may have capped a peak."""
    bound = [run.label for run in runs if run.cpu.get("load", 0.0) >= GENERATOR_BOUND_PERCENT]
    if not bound:
        return None
    return (
        f"the load generator used most of a core during {', '.join(bound)}: those peaks may "
        "be capped by the generator, not the server (try --wrk-threads 2)"
    )


def notes(runs: list[Run]) -> list[str]:
    return [note for note in (generator_bound(runs), contention(runs)) if note]


def print_report(runs: list[Run], v: Verdict) -> None:
    table = Table(title="onceonly ingest benchmark", box=box.SIMPLE_HEAD, padding=(0, 0))
    for i, header in enumerate(HEADERS):
        text = i in TEXT_COLUMNS
        # figures as wide as the longest word of their header (or "152.94"), so all fit
        width = None if text else max(6, *(len(word) for word in header.split()))
        table.add_column(header, justify="left" if text else "right", no_wrap=text, width=width)
    for row in rows(runs):
        table.add_row(*row)
    console.print()
    console.print(table)
    console.print(LEGEND)
    for line in summary_lines(v) + latency_lines(runs) + scaling_lines(runs):
        console.print(f"[red]{line}[/]" if "NOT met" in line else line)
    for note in notes(runs):
        console.print(f"[yellow]{note}[/]")
    if v.failed:
        console.print(
            f"[bold white on red] INVALID RUN: {v.failed} requests failed (not 2xx, or a "
            "socket error); the figures above do not measure successful deliveries [/]"
        )


def _how(r: Results) -> list[str]:
    opts = r.opts
    wrapped = [run.label for run in r.runs if run.peak.pool_wrapped]
    pool_note = (
        f" (the {opts.pool} of a closed loop were sent again in turn by {', '.join(wrapped)}; "
        "(d) answers a repeated one with ON CONFLICT DO NOTHING)"
        if wrapped
        else ""
    )
    return [
        f"closed loops: wrk (Debian's package), {opts.wrk_threads} thread(s), "
        f"{opts.concurrency} keep-alive connections, each delivery its own body and headers "
        f"(a Lua script, bench/_wrk.py); a warm-up run of {math.ceil(opts.warmup_s)} s, then "
        f"a run of {measured_run_s(opts.duration_s)} s with the CPU measured over "
        f"{opts.duration_s:g} s inside it; p50/p99 are wrk's (corrected for coordinated "
        "omission)",
        "then (c) in open loops at "
        + " and at ".join(fraction_name(f) for f in OPEN_LOOP_FRACTIONS)
        + f" of its peak, {opts.duration_s:g} s each: bench/openloop "
        "(Go, built by the benchmark; each request written once as its bytes), "
        f"{opts.concurrency} keep-alive connections opened before the clock starts, latency "
        "from each request's scheduled send time",
        "deliveries: AgentMail `message.received` events (~1.4 KB) over 1024 threads, "
        "every body distinct, signed with `svix.webhooks.Webhook.sign` right before each "
        "phase" + pool_note,
        f"broker: warmed up for {opts.broker_warmup_s:g} s of produce load before any "
        "measurement (JIT); (c), (c2), (m) produce to `onceonly-bench.deliveries`, "
        f"{r.partitions} partitions",
        "servers, each its own process: (a) aiohttp handler reading the body, 204; "
        "(b) the same + `ingest.verify.verify_svix`; (c) `onceonly ingest` "
        "(log level WARNING), acks=all, idempotent producer; (c2) the same with "
        "ONCEONLY_INGEST_PROCESSES=2 (a parent, two children on one port); (m) (c) with "
        "ONCEONLY_ENVELOPE_SECRET; (d) (b) + `INSERT INTO deliveries (event_id, body) VALUES "
        "($1, $2) ON CONFLICT DO NOTHING` (event_id the primary key, body jsonb) through an "
        f"asyncpg pool of {opts.pg_pool} connections, awaited before the 204",
        f"database of (d): {r.postgres}; started by the benchmark in its own data directory "
        "under .run/, stopped and removed after (d)",
        "CPU: read from /proc at the start and the end of the measured window (the legend "
        "under the table says what each column counts); `other` well above zero means the "
        "figures did not have the CPUs to themselves",
    ]


def section(r: Results) -> Section:
    """The ingest benchmark's part of the report: c as ratios to a, b and d, every
    process's CPU per delivery, the targets, c2 and the projection to more cores."""
    runs = r.runs
    v = verdict(runs)
    by = {run.key: run.figure() for run in runs}
    comparison = Comparison(
        "deliveries/s",
        by["c"],
        tuple(by[key] for key in ("a", "b", "d") if key in by),
        {"d": TARGET_C_OVER_D},
    )
    align = ["---" if i in TEXT_COLUMNS else "---:" for i in range(len(HEADERS))]
    body = [
        "| " + " | ".join(HEADERS) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(row) + " |" for row in rows(runs)),
        "",
        LEGEND,
        "",
        *(f"- {line}" for line in summary_lines(v) + latency_lines(runs) + scaling_lines(runs)),
        *(f"- **{note}**" for note in notes(runs)),
    ]
    invalid = (
        f"{v.failed} requests failed (not 2xx, or a socket error); the figures do not "
        "measure successful deliveries"
        if v.failed
        else None
    )
    return Section("Ingest", comparison, body, _how(r), invalid)

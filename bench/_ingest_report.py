"""The ingest benchmark's report: the verdict against the targets, the rows, the notes."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from rich.table import Table

from bench._ingest_results import TARGET_C_OVER_B, TARGET_P99_MS, Results, Run
from bench._load import Sample, percentile
from bench._procs import (
    console,
)
from bench._report import (
    CONTENDED_PERCENT,
    Comparison,
    Section,
    fmt_cpu,
    fmt_ms,
    fmt_ratio,
    met,
    ratio,
)

# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class Verdict:
    c_over_a: float
    c_over_b: float
    c_over_d: float
    half_p99_ms: float
    half_rate: float
    half_lag_p99_ms: float
    failed: int

    @property
    def ratio_met(self) -> bool:
        return self.c_over_b >= TARGET_C_OVER_B

    @property
    def latency_met(self) -> bool:
        return self.half_p99_ms < TARGET_P99_MS


def verdict(runs: list[Run]) -> Verdict:
    by = {run.key: run for run in runs}
    c = by["c"]

    def over(key: str) -> float:
        return ratio(c.peak.rate, by[key].peak.rate) if key in by else math.nan

    half_p99 = c.half.percentile_ms(0.99) if c.half is not None else math.nan
    failed = sum(run.peak.failed + (run.half.failed if run.half else 0) for run in runs)
    return Verdict(
        c_over_a=over("a"),
        c_over_b=over("b"),
        c_over_d=over("d"),
        half_p99_ms=half_p99,
        half_rate=c.half_rate,
        half_lag_p99_ms=percentile(c.half.send_lag, 0.99) * 1000 if c.half else math.nan,
        failed=failed,
    )


def rows(runs: list[Run]) -> list[tuple[str, str, str, str, str, str]]:
    """(server, deliveries/s, p50, p99, not 204, CPU) for each measured phase."""
    out = []
    for run in runs:
        phases: list[tuple[str, Sample, dict[str, float]]] = [(run.label, run.peak, run.cpu)]
        if run.half is not None:
            phases.append((f"{run.key} at half of its peak, open loop", run.half, run.half_cpu))
        for name, sample, cpu in phases:
            out.append(
                (
                    name,
                    f"{sample.rate:,.0f}",
                    fmt_ms(sample.percentile_ms(0.5)),
                    fmt_ms(sample.percentile_ms(0.99)),
                    str(sample.failed),
                    fmt_cpu(cpu),
                )
            )
    return out


HEADERS = ("server", "deliveries/s", "p50 ms", "p99 ms", "not 204", "CPU, % of one core")


def contention(runs: list[Run]) -> str | None:
    """A warning when the rest of the machine took CPU while a figure was measured."""
    windows = [run.cpu for run in runs] + [run.half_cpu for run in runs if run.half]
    worst = max((cpu.get("other", 0.0) for cpu in windows), default=0.0)
    if worst < CONTENDED_PERCENT:
        return None
    return (
        f"other work on this machine took up to {worst:.0f}% of a core while figures were "
        "measured (CPU column, `other`): the figures are lower and noisier than on an idle "
        "machine"
    )


#: Load generator CPU, in % of one core, from which it may be what limits a peak.
GENERATOR_BOUND_PERCENT = 85.0


def generator_bound(runs: list[Run]) -> str | None:
    """A note when the load generator, not the server, may have capped a peak."""
    bound = [run.label for run in runs if run.cpu.get("load", 0.0) >= GENERATOR_BOUND_PERCENT]
    if not bound:
        return None
    return (
        f"the load generator used most of a core during {', '.join(bound)}: those peaks are "
        "capped by the generator, not the server, so ratios against them overstate c"
    )


def cpu_budget(runs: list[Run]) -> str | None:
    """What c/b at the target would take in CPU, from this run's CPU per delivery.

    Ingest's and the broker's CPU per delivery come from (c), the load generator's from (b)
    (its lowest): the CPU that c at ``TARGET_C_OVER_B`` times b's rate would need, set
    against the machine's cores and the one event loop ingest runs on.
    """
    by = {run.key: run for run in runs}
    if "b" not in by or "c" not in by or by["b"].peak.rate <= 0 or by["c"].peak.rate <= 0:
        return None
    b, c = by["b"], by["c"]

    def micros(run: Run, process: str) -> float:
        return run.cpu.get(process, math.nan) / 100 / run.peak.rate * 1e6

    server, broker, load = micros(c, "server"), micros(c, "broker"), micros(b, "load")
    if any(math.isnan(x) for x in (server, broker, load)):
        return None
    wanted = TARGET_C_OVER_B * b.peak.rate
    need = wanted * (server + broker + load) / 1e4
    cores = os.cpu_count() or 1
    return (
        f"c/b >= {TARGET_C_OVER_B} means c >= {wanted:,.0f} deliveries/s. At this run's CPU per "
        f"delivery (ingest {server:.0f} µs and the broker {broker:.0f} µs during c, the load "
        f"generator {load:.0f} µs during b) that rate needs {need:.0f}% of one core in all, "
        f"on a machine of {cores * 100}%, and {wanted * server / 1e4:.0f}% of ingest's one "
        "event loop (at most 100%)"
    )


def summary_lines(v: Verdict) -> list[str]:
    return [
        f"c/a = {fmt_ratio(v.c_over_a)}",
        f"c/b = {fmt_ratio(v.c_over_b)} (target >= {TARGET_C_OVER_B}: {met(v.ratio_met)})",
        f"c/d = {fmt_ratio(v.c_over_d)}",
        f"p99 at half of c's peak ({v.half_rate:,.0f}/s) = {fmt_ms(v.half_p99_ms)} ms "
        f"(target < {TARGET_P99_MS:g} ms: {met(v.latency_met)}); the load generator sent "
        f"those requests up to {fmt_ms(v.half_lag_p99_ms)} ms after their scheduled time "
        "(p99), which the latency includes",
    ]


def print_report(runs: list[Run], v: Verdict) -> None:
    table = Table(title="onceonly ingest benchmark")
    for i, header in enumerate(HEADERS):
        table.add_column(header, justify="left" if i in (0, 5) else "right")
    for row in rows(runs):
        table.add_row(*row)
    console.print()
    console.print(table)
    for line in summary_lines(v):
        console.print(f"[red]{line}[/]" if "NOT met" in line else line)
    for note in (generator_bound(runs), cpu_budget(runs), contention(runs)):
        if note:
            console.print(f"[yellow]{note}[/]")
    if v.failed:
        console.print(
            f"[bold white on red] INVALID RUN: {v.failed} requests were not answered 204; "
            "the figures above do not measure successful deliveries [/]"
        )


def section(r: Results) -> Section:
    """The ingest benchmark's part of the report: c as ratios to a, b and d."""
    runs, opts = r.runs, r.opts
    v = verdict(runs)
    by = {run.key: run.figure() for run in runs}
    comparison = Comparison(
        "deliveries/s",
        by["c"],
        tuple(by[key] for key in ("a", "b", "d") if key in by),
        {"b": TARGET_C_OVER_B},
    )
    wrapped = [run.label for run in runs if run.peak.pool_wrapped]
    pool_note = (
        f" (the {opts.pool} of a closed loop were reused in turn by {', '.join(wrapped)}; "
        "(d) answers a reused one with ON CONFLICT DO NOTHING)"
        if wrapped
        else ""
    )
    body = [
        "| " + " | ".join(HEADERS) + " |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
        *("| " + " | ".join(row) + " |" for row in rows(runs)),
        "",
        *(f"- {line}" for line in summary_lines(v)),
        *([f"- {note}"] if (note := generator_bound(runs)) else []),
        *([f"- {note}"] if (note := cpu_budget(runs)) else []),
        *([f"- **{note}**"] if (note := contention(runs)) else []),
    ]
    how = [
        f"load: one asyncio + aiohttp client process, {opts.concurrency} keep-alive "
        f"connections; closed loop for {opts.warmup_s:g} s warm-up + {opts.duration_s:g} s "
        f"measured per server; then (c) open loop at half its peak for {opts.duration_s:g} s, "
        "latency from each request's scheduled send time",
        "deliveries: AgentMail `message.received` events (~1.4 KB) over 1024 threads, "
        "every body distinct, signed up front with `svix.webhooks.Webhook.sign`" + pool_note,
        f"broker: warmed up for {opts.broker_warmup_s:g} s of produce load before any "
        "measurement (JIT); (c) produces to `onceonly-bench.deliveries`, "
        f"{r.partitions} partitions",
        "servers, each its own process: (a) aiohttp handler reading the body, 204; "
        "(b) the same + `ingest.verify.verify_svix`; (c) `onceonly ingest` "
        "(log level WARNING), acks=all, idempotent producer; (d) (b) + `INSERT INTO "
        "deliveries (event_id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING` (event_id the "
        f"primary key, body jsonb) through an asyncpg pool of {opts.pg_pool} connections, "
        "awaited before the 204",
        f"database of (d): {r.postgres}; started by the benchmark in its own data directory "
        "under .run/, stopped and removed after (d)",
        "CPU column: CPU time over the measured window of the server, the load generator "
        "(`load`), the Kafka JVM (`broker`), PostgreSQL with its backends (`postgres`) and "
        "everything else on the machine (`other`: other processes, kernel work not charged "
        "to ours), in % of one core; `other` well above zero means the figures did not have "
        "the CPUs to themselves",
    ]
    invalid = (
        f"{v.failed} requests were not answered 204; the figures do not measure successful "
        "deliveries"
        if v.failed
        else None
    )
    return Section("Ingest", comparison, body, how, invalid)

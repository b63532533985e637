"""The ingest benchmark's report: the rows, the notes and the verdict's lines, pure functions."""

from __future__ import annotations

import math
from collections.abc import Callable

from bench._ingest_results import (
    OPEN_LOOP_FRACTIONS,
    TARGET_C_OVER_D,
    TARGET_FRACTION,
    Results,
    Run,
    fmt_us,
    fraction_name,
    per_delivery_us,
    summary_lines,
    verdict,
)
from bench._load import Sample, percentile
from bench._report import (
    Comparison,
    Section,
    contended,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    ratio,
    verdict_table,
)
from bench._wrk import measured_run_s

HEADERS = (
    "server", "deliveries/s", "p50 ms", "p99 ms", "failed", "server µs", "postgres µs",
    "broker µs", "total µs", "load µs", "server %", "other %",
)  # fmt: skip
#: What the CPU columns are, under the table.
LEGEND = (
    "µs: CPU per delivery of each process (user + system, all threads): the server with "
    "its descendants, PostgreSQL with its backends, the Kafka broker; total: the server's "
    "own processes (the server, and PostgreSQL for (d), the broker for (c), (c2), (m)); "
    "load: the load generator, apart (wrk; bench/openloop, Go, in the open loop). "
    "%: of one core, the server's, and the rest of the machine's (other processes, kernel "
    "work not charged to ours)"
)


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
            same = run.open_loops_at(ol.fraction)
            nth = next(i for i, other in enumerate(same, 1) if other is ol)
            count = f" {nth}/{len(same)}" if len(same) > 1 else ""
            name = f"({run.key}) {fraction_name(ol.fraction)} of peak, open loop{count}"
            out.append(_cells(name, ol.sample, ol.cpu, run.parts))
    return out


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


def rounds_lines(rounds: list[list[Run]]) -> list[str]:
    """Each server's peak in every round, and the two ratio targets round by round: how
    much of a figure is this machine's noise (for a single round, only what each count of
    connections gave)."""
    if len(rounds) < 2:
        return connections_line(rounds)
    peaks = _by_server(rounds, lambda run: fmt_rate(run.peak.rate))
    each = [verdict(rnd) for rnd in rounds if any(run.key == "c" for run in rnd)]
    return [
        f"deliveries/s in each of the {len(rounds)} rounds, in order: {peaks}; the rows "
        "above are each server's median round",
        *connections_line(rounds),
        "round by round, c's CPU per delivery / b's: "
        + ", ".join(fmt_ratio(v.cpu_over_b) for v in each)
        + "; c/d: "
        + ", ".join(fmt_ratio(v.c_over_d) for v in each),
    ]


def _by_server(rounds: list[list[Run]], cell: Callable[[Run], str]) -> str:
    """``(key) cell, cell, ...; ...``: each server's cells, round by round."""
    keys = [run.key for run in rounds[0]]
    return "; ".join(
        f"({key}) " + ", ".join(cell(run) for rnd in rounds for run in rnd if run.key == key)
        for key in keys
    )


def connections_line(rounds: list[list[Run]]) -> list[str]:
    """Each server's deliveries/s at each count of wrk's connections, round by round, and
    the count of its peak: nothing when the closed loops ran at one count."""
    if not any(len(run.tried) > 1 for rnd in rounds for run in rnd):
        return []
    each = _by_server(
        rounds, lambda run: "/".join(fmt_rate(run.tried[n]) for n in sorted(run.tried))
    )
    counts = "/".join(str(n) for n in sorted(rounds[0][0].tried))
    return [
        f"deliveries/s at {counts} connections, round by round: {each}; each round's peak "
        "is the fastest"
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
    return contended(
        (cpu.get("other", 0.0) for cpu in windows),
        "while figures were measured (column `other`)",
        "the figures are lower and noisier than on an idle machine",
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
        f"closed loops: every server in turn, {_rounds(opts.rounds)}; "
        f"wrk (Debian's package), {opts.wrk_threads} thread(s), "
        f"at {_counts(opts.concurrency)} keep-alive connections in turn (each server's peak "
        "the fastest), each delivery its own body and headers "
        f"(a Lua script, bench/_wrk.py); a warm-up run of {math.ceil(opts.warmup_s)} s, then "
        f"a run of {measured_run_s(opts.duration_s)} s with the CPU measured over "
        f"{opts.duration_s:g} s inside it; p50/p99 are wrk's (corrected for coordinated "
        "omission)",
        "then (c) in open loops at "
        + " and at ".join(fraction_name(f) for f in OPEN_LOOP_FRACTIONS)
        + f" of its peak ({_half_runs(opts.target_runs)}), {opts.duration_s:g} s each: "
        "bench/openloop "
        "(Go, built by the benchmark; each request written once as its bytes), "
        f"{max(opts.concurrency)} keep-alive connections opened before the clock starts, latency "
        "from each request's scheduled send time",
        "deliveries: AgentMail `message.received` events (~1.4 KB) over 1024 threads, "
        "every body distinct, signed with `svix.webhooks.Webhook.sign` right before each "
        "phase" + pool_note,
        f"broker: warmed up for {opts.broker_warmup_s:g} s of produce load before any "
        "measurement (JIT); (c), (c2), (m) produce to `onceonly-bench.deliveries`, "
        f"{r.partitions} partitions",
        "servers, each its own process: (a) aiohttp handler reading the body, 204; "
        "(b) the same + `onceonly.ingest.verify.verify_svix`; (c) `onceonly ingest` "
        "(log level WARNING), acks=all, idempotent producer; (c2) the same with "
        "ONCEONLY_INGEST_PROCESSES=2 (a parent, two children on one port); (m) (c) with "
        "ONCEONLY_ENVELOPE_SECRET; (d) (b) + `INSERT INTO deliveries (event_id, body) VALUES "
        "($1, $2) ON CONFLICT DO NOTHING` (event_id the primary key, body jsonb) through an "
        f"asyncpg pool of {opts.pg_pool} connections, awaited before the 204",
        f"database of (d): {r.postgres}; started by the benchmark in its own data directory "
        "under .run/ before the first round, stopped and removed after the last",
        "CPU: read from /proc at the start and the end of the measured window (the legend "
        "under the table says what each column counts); `other` well above zero means the "
        "figures did not have the CPUs to themselves",
    ]


def _counts(counts: tuple[int, ...]) -> str:
    """``64 and 128``; ``64, 128 and 256``; ``128``."""
    words = [str(count) for count in counts]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _rounds(count: int) -> str:
    if count <= 1:
        return "once"
    return (
        f"{count} rounds, each starting one server later than the one before (a, b, c, c2, "
        "m, d; then b, c, ..., a), each server's figures those of its median round by "
        "deliveries/s"
    )


def _half_runs(count: int) -> str:
    if count <= 1:
        return "each once"
    return f"half {count} times, the target judged on the run of median p99"


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
    body = [
        *verdict_table(HEADERS, rows(runs), verdict=False),
        "",
        LEGEND,
        "",
        *(f"- {line}" for line in summary_lines(v) + rounds_lines(r.rounds)),
        *(f"- {line}" for line in latency_lines(runs) + scaling_lines(runs)),
        *(f"- **{note}**" for note in notes(runs)),
    ]
    invalid = (
        f"{v.failed} requests failed (not 2xx, or a socket error); the figures do not "
        "measure successful deliveries"
        if v.failed
        else None
    )
    return Section("Ingest", comparison, body, _how(r), invalid)

"""Ingest benchmark: what verifying and storing a delivery costs next to answering it bare.

``python -m bench.ingest`` measures, in one run, on one machine, under one load generator
(``python -m bench``, which ``make bench`` runs, measures this and the processors):

(a) a bare aiohttp POST handler that reads the body and answers 204;
(b) the same handler with Svix verification only (``ingest.verify.verify_svix``);
(c) onceonly ingest (``onceonly ingest``) producing to a real broker with acks=all;
(d) the reference design of AgentMail's webhook article: (b), then
    ``INSERT ... ON CONFLICT DO NOTHING`` into PostgreSQL (Debian's package, started by
    the benchmark in a data directory of its own, :mod:`bench._postgres`) through asyncpg.

Each server is its own process, so the load generator never shares its CPU or GIL.
The broker is an :class:`~devstack.broker.EmbeddedBroker` on a free port in a temporary
run directory, or the cluster named by ``ONCEONLY_KAFKA_BOOTSTRAP`` when it is set (the
benchmark then produces to topics of its own, ``onceonly-bench.*``).

Per server: a closed loop (``--concurrency`` keep-alive connections back to back,
``--warmup`` s unmeasured, then ``--duration`` s measured) gives deliveries/s and
p50/p99 at the peak. Then (c) gets an open loop at half its peak rate, arrivals
scheduled by the clock and latency counted from the scheduled time. Targets (the
issue): c/b >= 0.8, and p99 < 20 ms at half of c's peak.

The figures are printed and written to ``bench/results/ingest-<date>.md`` (and ``.png``).
Any answer other than 204 makes the run invalid: it says so, and exits 1.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.table import Table

from bench._load import Sample, closed_loop, open_loop, percentile, sign_pool
from bench._procs import (
    Broker,
    CpuWindow,
    ServerProcess,
    console,
    create_topics,
    kafka,
    loadavg,
    revision,
)
from bench._report import (
    CONTENDED_PERCENT,
    Comparison,
    Figure,
    IngestOptions,
    Section,
    about,
    command_line,
    execute,
    fmt_cpu,
    fmt_ms,
    fmt_ratio,
    ingest_options,
    met,
    ratio,
    results_dir_option,
    write_report,
)
from bench._servers import ROUTE

TARGET_C_OVER_B = 0.8
TARGET_P99_MS = 20.0
BENCH_TOPIC_PREFIX = "onceonly-bench"
#: CPU figures that count a process with all its children: PostgreSQL and its backends.
TREES = frozenset({"postgres"})

#: What each server is, in the report.
LABELS = {
    "a": "(a) bare aiohttp",
    "b": "(b) + svix verify",
    "c": "(c) onceonly ingest",
    "d": "(d) + svix + PostgreSQL INSERT",
}


@dataclass(slots=True)
class Run:
    """One server's figures."""

    key: str
    label: str
    peak: Sample
    cpu: dict[str, float]
    half: Sample | None = None
    half_rate: float = 0.0
    half_cpu: dict[str, float] = field(default_factory=dict)

    def figure(self) -> Figure:
        return Figure(
            self.key,
            self.label,
            self.peak.rate,
            self.peak.percentile_ms(0.5),
            self.peak.percentile_ms(0.99),
        )


@dataclass(slots=True)
class Results:
    """What one run of the ingest benchmark measured, and on what."""

    opts: IngestOptions
    partitions: int
    runs: list[Run]
    postgres: str = "not started"  #: the database of (d), for the report


# --------------------------------------------------------------------------- the broker


def warm_broker(bootstrap: str, topic: str, seconds: float) -> int:
    """Produce envelope-sized records for ``seconds`` with ingest's producer settings, in
    small flushed batches like ingest's, so that the JVM has compiled its produce path
    before anything is measured (a cold broker costs several times the CPU per record).
    Returns how many records it stored."""
    from confluent_kafka import Producer

    from foundation.kafka import producer_config

    producer = Producer(
        producer_config(
            bootstrap,
            timeout_ms=10_000,
            max_record_bytes=8 * 1024 * 1024,
            log_level=3,  # a new broker's "coordinator load in progress" retries are normal
        )
    )
    value = b"x" * 2048
    stored = 0
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        for _ in range(64):
            producer.produce(topic, value, key=f"agentmail:thr_{n % 1024:04d}".encode())
            n += 1
        producer.flush(10)
        stored += 64
    return stored


# --------------------------------------------------------------------------- one server


def server_env(secret: str, extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without any ONCEONLY_* variable, plus ours."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ONCEONLY_")}
    env["ONCEONLY_AGENTMAIL_WEBHOOK_SECRET"] = secret
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


async def measure(
    key: str,
    label: str,
    server: ServerProcess,
    base: str,
    secret: str,
    opts: IngestOptions,
    *,
    others: dict[str, int | None],
    half_of_peak: bool = False,
) -> Run:
    with server:
        await server.wait_ready(f"{base}/healthz")
        url = base + ROUTE
        console.print(f"{label}: signing {opts.pool} deliveries, then {opts.warmup_s:g} s warm-up")
        pool = sign_pool(secret, opts.pool)
        cpu = CpuWindow({"server": server.pid, "load": None, **others}, TREES)
        window = asyncio.create_task(cpu.measure(opts.warmup_s, opts.duration_s))
        peak = await closed_loop(
            url,
            pool,
            concurrency=opts.concurrency,
            warmup_s=opts.warmup_s,
            duration_s=opts.duration_s,
        )
        await window
        run = Run(key, label, peak, cpu.percent)
        console.print(
            f"{label}: {peak.rate:,.0f} deliveries/s, p50 {peak.percentile_ms(0.5):.2f} ms, "
            f"p99 {peak.percentile_ms(0.99):.2f} ms" + _failed_note(peak)
        )
        if half_of_peak and peak.rate > 0:
            run.half_rate = peak.rate / 2
            total = math.ceil(run.half_rate * opts.duration_s)
            console.print(f"{label}: open loop at {run.half_rate:,.0f}/s for {opts.duration_s:g} s")
            pool = sign_pool(secret, total)  # every open-loop delivery distinct
            cpu = CpuWindow({"server": server.pid, "load": None, **others}, TREES)
            window = asyncio.create_task(cpu.measure(0.05, opts.duration_s))
            run.half = await open_loop(
                url,
                pool,
                rate=run.half_rate,
                duration_s=opts.duration_s,
                concurrency=opts.concurrency,
            )
            await window
            run.half_cpu = cpu.percent
            half = run.half
            console.print(
                f"{label}: at {run.half_rate:,.0f}/s p50 {half.percentile_ms(0.5):.2f} ms, "
                f"p99 {half.percentile_ms(0.99):.2f} ms" + _failed_note(half)
            )
    return run


def _failed_note(sample: Sample) -> str:
    return f"  [bold red]NOT 204: {sample.failures()}[/]" if sample.failed else ""


async def _describe_postgres(dsn: str, version: str) -> str:
    import asyncpg

    connection = await asyncpg.connect(dsn)
    try:
        names = ("fsync", "synchronous_commit", "shared_buffers", "wal_level")
        settings = [f"{n} {await connection.fetchval(f'SHOW {n}')}" for n in names]
        full = await connection.fetchval("SHOW server_version")
    finally:
        await connection.close()
    return f"PostgreSQL {full} (Debian's package, major {version}): " + ", ".join(settings)


async def run_all(
    opts: IngestOptions, work: Path, broker: Broker, topics: dict[str, str], partitions: int
) -> Results:
    from bench._postgres import postgres
    from devstack.broker import free_port

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    python = sys.executable
    jvm: dict[str, int | None] = {"broker": broker.pid} if broker.pid else {}
    results = Results(opts, partitions, [])

    async def baseline(
        key: str, kind: str, extra_args: list[str], others: dict[str, int | None]
    ) -> None:
        port = free_port()
        server = ServerProcess(
            LABELS[key],
            [python, "-m", "bench._servers", kind, "--port", str(port), *extra_args],
            server_env(secret, {}),
            work / f"{key}-{kind}.log",
        )
        results.runs.append(
            await measure(
                key, LABELS[key], server, f"http://127.0.0.1:{port}", secret, opts, others=others
            )
        )

    await baseline("a", "bare", [], jvm)
    await baseline("b", "svix", [], jvm)

    port = free_port()
    ingest = ServerProcess(
        LABELS["c"],
        [python, "-m", "onceonly", "ingest"],
        server_env(
            secret,
            {
                "ONCEONLY_KAFKA_BOOTSTRAP": broker.bootstrap,
                "ONCEONLY_PARTITIONS": str(partitions),
                "ONCEONLY_INGEST_HOST": "127.0.0.1",
                "ONCEONLY_INGEST_PORT": str(port),
                "ONCEONLY_RUN_DIR": str(work),
                "ONCEONLY_LOG_LEVEL": "WARNING",
                **topics,
            },
        ),
        work / "c-ingest.log",
    )
    results.runs.append(
        await measure(
            "c",
            LABELS["c"],
            ingest,
            f"http://127.0.0.1:{port}",
            secret,
            opts,
            others=jvm,
            half_of_peak=True,
        )
    )

    with postgres() as db:
        results.postgres = await _describe_postgres(db.dsn, db.version)
        await baseline(
            "d",
            "postgres",
            ["--dsn", db.dsn, "--pool-size", str(opts.pg_pool)],
            {"postgres": db.pid, **jvm},
        )
    return results


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


# --------------------------------------------------------------------------- main


def collect(opts: IngestOptions, broker: Broker, work: Path) -> Results:
    """Run the ingest benchmark against ``broker``; print its figures."""
    from foundation.settings import Settings

    partitions = Settings.from_env().partitions
    topics = create_topics(broker.bootstrap, partitions, BENCH_TOPIC_PREFIX)
    if opts.broker_warmup_s > 0:
        console.print(f"warming the broker up for {opts.broker_warmup_s:g} s …")
        warm_broker(broker.bootstrap, topics["ONCEONLY_DELIVERIES_TOPIC"], opts.broker_warmup_s)
    results = asyncio.run(run_all(opts, work, broker, topics, partitions))
    print_report(results.runs, verdict(results.runs))
    return results


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@ingest_options
@results_dir_option
def main(ingest: IngestOptions, results_dir: Path) -> None:
    """Deliveries/s and p50/p99 of (a) bare aiohttp, (b) + svix verify, (c) onceonly ingest,
    (d) + svix + PostgreSQL INSERT ... ON CONFLICT DO NOTHING."""
    load_before = loadavg()
    code = revision()

    def body() -> tuple[Results, str]:
        with tempfile.TemporaryDirectory(prefix="onceonly-bench-") as tmp, kafka(Path(tmp)) as b:
            return collect(ingest, b, Path(tmp)), b.about

    results, kafka_about = execute(body)
    md, png = write_report(
        "ingest",
        "Ingest benchmark",
        [section(results)],
        about(kafka_about, load_before, code),
        command_line("bench.ingest"),
        results_dir,
    )
    console.print(f"written to {md} and {png.name}")
    if verdict(results.runs).failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""Ingest benchmark (``python -m bench.ingest``): what verifying and storing a delivery costs.

(a) bare aiohttp, (b) + Svix verify, (c) onceonly ingest (acks=all), (c2) with two ingest
processes, (m) with the envelope MAC, (d) + ``INSERT ... ON CONFLICT DO NOTHING`` into
PostgreSQL. Closed loops by wrk, then open loops of (c). Targets (issue 13): c's CPU per
delivery <= 1.5 x b's, c >= 2 x d, p99 < 20 ms at half of c's peak; any answer not 2xx
makes the run invalid (exit 1). Report: ``bench/results/ingest-<date>.md`` and ``.png``.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from pathlib import Path

import aiohttp

from bench._ingest_report import section
from bench._ingest_results import (
    OPEN_LOOP_FRACTIONS,
    TARGET_FRACTION,
    OpenLoop,
    Results,
    Run,
    fastest,
    rotated,
    verdict,
)
from bench._load import Sample, sign_pool, webhook_secret
from bench._openloop import build_generator, open_loop
from bench._options import INGEST_OPTIONS, IngestOptions, Variant, ingest_argv, with_partitions
from bench._proc_stack import base_env, ingest_env
from bench._procs import BenchError, Broker, CpuWindow, ServerProcess, console, create_topics
from bench._runner import Scenario, command
from bench._servers import ROUTE, local_url
from bench._wrk import WrkLoad, wrk_closed_loop

BENCH_TOPIC_PREFIX = "onceonly-bench"
#: CPU figures that count a process with all its descendants: PostgreSQL and its backends;
#: the server (the ingest processes of (c2) are children of their parent).
TREES = frozenset({"postgres", "server"})

#: What (c2) and (m) add to (c)'s environment.
VARIANT_ENV = {
    "c2": {"ONCEONLY_INGEST_PROCESSES": "2"},
    "m": {"ONCEONLY_ENVELOPE_SECRET": "bench-envelope-secret"},
}
#: What each server is, in the report.
LABELS = {
    "a": "(a) bare aiohttp",
    "b": "(b) + svix verify",
    "c": "(c) onceonly ingest",
    "c2": "(c2) ingest, 2 processes",
    "m": "(m) ingest + envelope MAC",
    "d": "(d) + svix + PostgreSQL INSERT",
}
#: The processes each server's work takes, beside its own (the report's total per delivery).
PARTS = {"c": ("broker",), "c2": ("broker",), "m": ("broker",), "d": ("postgres",)}


def warmed_topics(broker: Broker, partitions: int, warmup_s: float) -> dict[str, str]:
    """The benchmark's topics, made; then :func:`warm_broker` for ``warmup_s`` (if any)."""
    topics = create_topics(broker.bootstrap, partitions, BENCH_TOPIC_PREFIX)
    if warmup_s > 0:
        console.print(f"warming the broker up for {warmup_s:g} s …")
        warm_broker(broker.bootstrap, topics["ONCEONLY_DELIVERIES_TOPIC"], warmup_s)
    return topics


def warm_broker(bootstrap: str, topic: str, seconds: float) -> int:
    """Produce envelope-sized records for ``seconds`` with ingest's producer settings, in
    small flushed batches like ingest's, so that the JVM has compiled its produce path
    before anything is measured (a cold broker costs several times the CPU per record).
    Returns how many records it stored."""
    from confluent_kafka import Producer

    from onceonly.foundation.kafka import Connection, producer_config

    producer = Producer(
        producer_config(
            Connection(bootstrap, produce_timeout_ms=10_000, record_max_bytes=8 * 1024 * 1024),
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


def server_env(secret: str, extra: dict[str, str]) -> dict[str, str]:
    """:func:`~bench._proc_stack.base_env` with the webhook secret and ``extra``."""
    return base_env({"ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": secret, **extra})


async def wait_processes(server: ServerProcess, url: str, count: int, timeout_s: float) -> None:
    """Wait until ``count`` distinct processes have answered ``GET url`` (``/healthz`` names
    the one that answered), each on a new connection, which the kernel spreads over them."""
    seen: set[object] = set()
    deadline = time.monotonic() + timeout_s
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while len(seen) < count:
            if time.monotonic() > deadline or not server.alive:
                raise BenchError(
                    f"{server.name}: {len(seen)} of {count} processes answered {url} within "
                    f"{timeout_s:g} s; its output:\n{server.log_tail()}"
                )
            async with session.get(url) as response:
                seen.add((await response.json()).get("process"))
            await asyncio.sleep(0.02)


async def peak(
    key: str,
    label: str,
    server: ServerProcess,
    url: str,
    secret: str,
    opts: IngestOptions,
    others: dict[str, int | None],
) -> Run:
    """The closed loops of one server by wrk, one at each of ``opts.concurrency``
    connections, with the CPU of every process meanwhile: the fastest is its peak."""
    parts = ("server", *PARTS.get(key, ()))
    runs: list[Run] = []
    for connections in opts.concurrency:
        console.print(
            f"{label}: signing {opts.pool} deliveries, then {opts.warmup_s:g} s warm-up "
            f"at {connections} connections"
        )
        pool = sign_pool(secret, opts.pool)
        # the server's whole process tree: (c2)'s children, PostgreSQL's backends
        cpu = CpuWindow({"server": server.pid, "load": None, **others}, TREES)
        load = WrkLoad(connections, opts.wrk_threads)
        sample = await wrk_closed_loop(
            url, pool, load, warmup_s=opts.warmup_s, duration_s=opts.duration_s, window=cpu
        )
        console.print(
            f"{label}: {sample.rate:,.0f} deliveries/s at {connections} connections, "
            f"p50 {sample.percentile_ms(0.5):.2f} ms, p99 {sample.percentile_ms(0.99):.2f} ms"
            + _failed_note(sample)
        )
        runs.append(Run(key, label, sample, cpu.percent, parts, connections=connections))
    return fastest(runs)


async def fixed_rate(
    server: ServerProcess,
    base: str,
    secret: str,
    generator: Path,
    *,
    rate: float,
    duration_s: float,
    connections: int,
    others: dict[str, int | None],
) -> tuple[Sample, CpuWindow]:
    """One open loop at ``rate`` against the server at ``base``: a pool of distinct signed
    deliveries, and the window of CPU of the server (with its descendants), the generator
    and ``others`` while it runs."""
    pool = sign_pool(secret, math.ceil(rate * duration_s))
    cpu = CpuWindow({"server": server.pid, "load": None, **others}, TREES)
    sample = await open_loop(
        generator,
        base + ROUTE,
        pool,
        rate=rate,
        duration_s=duration_s,
        concurrency=connections,
        warm_url=f"{base}/healthz",
        window=cpu,
    )
    return sample, cpu


async def open_loops(
    run: Run,
    server: ServerProcess,
    base: str,
    secret: str,
    opts: IngestOptions,
    others: dict[str, int | None],
    generator: Path,
) -> None:
    """The open loops at each of :data:`OPEN_LOOP_FRACTIONS` of ``run``'s peak (the
    target's ``opts.target_runs`` times), their latency and CPU added to ``run``."""
    for fraction in OPEN_LOOP_FRACTIONS:
        rate = run.peak.rate * fraction
        for _ in range(opts.target_runs if fraction == TARGET_FRACTION else 1):
            console.print(f"{run.label}: open loop at {rate:,.0f}/s for {opts.duration_s:g} s")
            sample, cpu = await fixed_rate(
                server, base, secret, generator, rate=rate, duration_s=opts.duration_s,
                connections=max(opts.concurrency), others=others,
            )  # fmt: skip
            waited = cpu.waited.get("server", math.nan)
            run.open_loops.append(OpenLoop(fraction, rate, sample, cpu.percent, cpu.steal, waited))
            console.print(
                f"{run.label}: at {rate:,.0f}/s p50 {sample.percentile_ms(0.5):.2f} ms, "
                f"p99 {sample.percentile_ms(0.99):.2f} ms; steal {cpu.steal:.1f}% of a core, "
                f"the server's loop waited for a CPU {waited:.1f}% of the time"
                + _failed_note(sample)
            )


async def measure(
    key: str,
    server: ServerProcess,
    base: str,
    secret: str,
    opts: IngestOptions,
    *,
    others: dict[str, int | None],
    processes: int = 1,
) -> Run:
    """The closed loop of one server, which is started for it and stopped after."""
    with server:
        await server.wait_ready(f"{base}/healthz")
        if processes > 1:
            await wait_processes(server, f"{base}/healthz", processes, timeout_s=60)
        return await peak(key, LABELS[key], server, base + ROUTE, secret, opts, others)


def _failed_note(sample: Sample) -> str:
    return f"  [bold red]NOT 204: {sample.failures()}[/]" if sample.failed else ""


def ingest_server(
    secret: str,
    bootstrap: str,
    topics: dict[str, str],
    partitions: int,
    work: Path,
    port: int,
    key: str = "c",
    variant: Variant | None = None,
) -> ServerProcess:
    """(c): ``onceonly ingest`` on ``port`` against the benchmark's broker and topics;
    (c2): the same with ONCEONLY_INGEST_PROCESSES=2; (m): with ONCEONLY_ENVELOPE_SECRET
    set, so each record carries its MAC; or ``variant`` (``bench.ingest_cpu``'s, or
    ``bench._agent_load``'s with its environment)."""
    if variant is None:
        variant = Variant(key, env=VARIANT_ENV.get(key, {}))
    env = ingest_env(bootstrap, partitions, port, work, topics, **variant.env)
    argv = ingest_argv(sys.executable, variant)
    log = work / f"{variant.name}-ingest.log"
    return ServerProcess(LABELS.get(variant.name, variant.name), argv, server_env(secret, env), log)


def baseline_server(
    key: str, kind: str, secret: str, work: Path, port: int, *args: str
) -> ServerProcess:
    """(a), (b) or (d): ``bench._servers``' ``kind`` server on ``port``."""
    argv = [sys.executable, "-m", "bench._servers", kind, "--port", str(port), *args]
    return ServerProcess(LABELS[key], argv, server_env(secret, {}), work / f"{key}-{kind}.log")


async def run_all(
    opts: IngestOptions, work: Path, broker: Broker, topics: dict[str, str], partitions: int
) -> Results:
    from bench._postgres import describe_postgres, postgres
    from devstack.ports import free_port

    secret = webhook_secret()
    jvm: dict[str, int | None] = {"broker": broker.pid} if broker.pid else {}
    results = Results(opts, partitions, [])
    generator = build_generator(work)  # before any run: a missing Go fails at once

    def baseline(key: str, kind: str, extra_args: list[str]) -> tuple[ServerProcess, str]:
        port = free_port()
        return baseline_server(key, kind, secret, work, port, *extra_args), local_url(port)

    def ingest(key: str) -> tuple[ServerProcess, str]:
        port = free_port()
        server = ingest_server(secret, broker.bootstrap, topics, partitions, work, port, key)
        return server, local_url(port)

    with postgres() as db:
        results.postgres = await describe_postgres(db.dsn, db.version)
        pool = ["--dsn", db.dsn, "--pool-size", str(opts.pg_pool)]
        servers = {
            "a": (lambda: baseline("a", "bare", []), jvm),
            "b": (lambda: baseline("b", "svix", []), jvm),
            "c": (lambda: ingest("c"), jvm),
            "c2": (lambda: ingest("c2"), jvm),
            "m": (lambda: ingest("m"), jvm),
            "d": (lambda: baseline("d", "postgres", pool), {"postgres": db.pid, **jvm}),
        }
        for number in range(opts.rounds):
            console.print(f"round {number + 1} of {opts.rounds}: every server's closed loop")
            results.rounds.append([])
            for key in rotated(list(servers), number):
                start, others = servers[key]
                server, base = start()
                run = await measure(
                    key, server, base, secret, opts, others=others,
                    processes=2 if key == "c2" else 1,
                )  # fmt: skip
                results.rounds[-1].append(run)
    results.choose_medians()
    c = next(run for run in results.runs if run.key == "c")
    if c.peak.rate > 0:  # the open loops, at fractions of c's median peak, on a new ingest
        server, base = ingest("c")
        with server:
            await server.wait_ready(f"{base}/healthz")
            await open_loops(c, server, base, secret, opts, jvm, generator)
    return results


def collect(opts: IngestOptions, broker: Broker, work: Path) -> Results:
    """Run the ingest benchmark against ``broker``."""
    topics = warmed_topics(broker, opts.partitions, opts.broker_warmup_s)
    return asyncio.run(run_all(opts, work, broker, topics, opts.partitions))


INGEST = Scenario(
    "ingest",
    "Ingest benchmark",
    INGEST_OPTIONS,
    with_partitions,
    collect,
    sections=lambda _opts, results: [section(results)],
    failed=lambda results: verdict(results.runs).failed > 0,
)
main = command(
    INGEST,
    """Deliveries/s, p50/p99 and CPU per delivery of every process, under wrk, of (a) bare
    aiohttp, (b) + svix verify, (c) onceonly ingest, (c2) with 2 ingest processes, (m) with
    the envelope MAC, (d) + svix + PostgreSQL INSERT ... ON CONFLICT DO NOTHING.""",
)


if __name__ == "__main__":
    main()

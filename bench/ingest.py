"""Ingest benchmark: what verifying and storing a delivery costs next to answering it bare.

``python -m bench.ingest`` (``make bench``) measures, in one run, on one machine, under
one load generator:

(a) a bare aiohttp POST handler that reads the body and answers 204;
(b) the same handler with Svix verification only (``ingest.verify.verify_svix``);
(c) onceonly ingest (``onceonly ingest``) producing to a real broker with acks=all.

Each server is its own process, so the load generator never shares its CPU or GIL.
The broker is an :class:`~onceonly.broker.EmbeddedBroker` on a free port in a temporary
run directory, or the cluster named by ``ONCEONLY_KAFKA_BOOTSTRAP`` when it is set (the
benchmark then produces to topics of its own, ``onceonly-bench.*``).

Per server: a closed loop (``--concurrency`` keep-alive connections back to back,
``--warmup`` s unmeasured, then ``--duration`` s measured) gives deliveries/s and
p50/p99 at the peak. Then (c) gets an open loop at half its peak rate, arrivals
scheduled by the clock and latency counted from the scheduled time. Targets (the
issue): c/b >= 0.8, and p99 < 20 ms at half of c's peak.

The figures are printed and written to ``bench/results/ingest-<date>.md``. Any answer
other than 204 makes the run invalid: it says so, and exits 1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import click
from rich.console import Console
from rich.table import Table

from bench._load import Sample, closed_loop, open_loop, percentile, sign_pool
from bench._procs import ROOT, BenchError, CpuWindow, ServerProcess, kafka_version, machine
from bench._servers import ROUTE

TARGET_C_OVER_B = 0.8
TARGET_P99_MS = 20.0
BENCH_TOPIC_PREFIX = "onceonly-bench"
RESULTS_DIR = ROOT / "bench" / "results"

# Wide enough for the table when the output is a pipe or a file (make bench | tee).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)


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


@dataclass(frozen=True, slots=True)
class Options:
    duration_s: float
    warmup_s: float
    concurrency: int
    pool: int
    broker_warmup_s: float
    partitions: int


# --------------------------------------------------------------------------- the broker


@contextlib.contextmanager
def kafka(run_dir: Path) -> Iterator[tuple[str, str]]:
    """A broker for the run: (bootstrap, description). Stopped on exit if we started it."""
    external = os.environ.get("ONCEONLY_KAFKA_BOOTSTRAP")
    if external:
        yield external, f"external cluster at {external} (ONCEONLY_KAFKA_BOOTSTRAP)"
        return
    from onceonly.broker import EmbeddedBroker, free_port, kafka_classpath
    from onceonly.settings import Settings

    # Resolve the jars once into the project's run directory (as `make jars` does) and
    # reuse that classpath, so that the temporary run directory does not run Maven again.
    cached_dir = Settings.from_env().run_dir.resolve()
    classpath = kafka_classpath(cached_dir)
    shutil.copyfile(cached_dir / "kafka.classpath", run_dir / "kafka.classpath")
    broker = EmbeddedBroker(run_dir, port=free_port())
    console.print(f"starting Kafka {kafka_version(classpath)} (embedded) at {broker.bootstrap} …")
    broker.start()
    try:
        yield broker.bootstrap, f"{kafka_version(classpath)}, embedded single-node KRaft broker"
    finally:
        console.print("stopping Kafka …")
        broker.stop()


def broker_pid(run_dir: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((run_dir / "broker" / "broker.pid").read_text(encoding="ascii").strip())
    return None


def create_topics(bootstrap: str, partitions: int) -> dict[str, str]:
    """The benchmark's own topics, shaped as onceonly's; the variables ingest needs for them."""
    from onceonly.kafka import Admin
    from onceonly.settings import Settings
    from onceonly.topics import topic_specs

    names = {
        "ONCEONLY_DELIVERIES_TOPIC": f"{BENCH_TOPIC_PREFIX}.deliveries",
        "ONCEONLY_LEDGER_TOPIC": f"{BENCH_TOPIC_PREFIX}.replies",
        "ONCEONLY_DEAD_LETTER_TOPIC": f"{BENCH_TOPIC_PREFIX}.dead-letters",
    }
    settings = Settings(
        kafka_bootstrap=bootstrap,
        partitions=partitions,
        deliveries_topic=names["ONCEONLY_DELIVERIES_TOPIC"],
        ledger_topic=names["ONCEONLY_LEDGER_TOPIC"],
        dead_letter_topic=names["ONCEONLY_DEAD_LETTER_TOPIC"],
    )
    Admin(bootstrap).ensure_topics(topic_specs(settings))
    return names


def warm_broker(bootstrap: str, topic: str, seconds: float) -> int:
    """Produce envelope-sized records for ``seconds`` with ingest's producer settings, in
    small flushed batches like ingest's, so that the JVM has compiled its produce path
    before anything is measured (a cold broker costs several times the CPU per record).
    Returns how many records it stored."""
    from confluent_kafka import Producer

    from onceonly.kafka import producer_config

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
    opts: Options,
    *,
    others: dict[str, int | None],
    half_of_peak: bool = False,
) -> Run:
    with server:
        await server.wait_ready(f"{base}/healthz")
        url = base + ROUTE
        console.print(f"{label}: signing {opts.pool} deliveries, then {opts.warmup_s:g} s warm-up")
        pool = sign_pool(secret, opts.pool)
        cpu = CpuWindow({"server": server.pid, "load": None, **others})
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
            cpu = CpuWindow({"server": server.pid, "load": None, **others})
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


async def run_all(opts: Options, work: Path, bootstrap: str, topics: dict[str, str]) -> list[Run]:
    from onceonly.broker import free_port

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    python = sys.executable
    partitions = opts.partitions
    jvm = {"broker": broker_pid(work)} if broker_pid(work) else {}
    runs: list[Run] = []

    port = free_port()
    bare = ServerProcess(
        "(a) bare aiohttp",
        [python, "-m", "bench._servers", "bare", "--port", str(port)],
        server_env(secret, {}),
        work / "a-bare.log",
    )
    runs.append(
        await measure(
            "a", "(a) bare aiohttp", bare, f"http://127.0.0.1:{port}", secret, opts, others=jvm
        )
    )

    port = free_port()
    svix = ServerProcess(
        "(b) aiohttp + svix verify",
        [python, "-m", "bench._servers", "svix", "--port", str(port)],
        server_env(secret, {}),
        work / "b-svix.log",
    )
    runs.append(
        await measure(
            "b", "(b) + svix verify", svix, f"http://127.0.0.1:{port}", secret, opts, others=jvm
        )
    )

    port = free_port()
    ingest = ServerProcess(
        "(c) onceonly ingest",
        [python, "-m", "onceonly", "ingest"],
        server_env(
            secret,
            {
                "ONCEONLY_KAFKA_BOOTSTRAP": bootstrap,
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
    runs.append(
        await measure(
            "c",
            "(c) onceonly ingest",
            ingest,
            f"http://127.0.0.1:{port}",
            secret,
            opts,
            others=jvm,
            half_of_peak=True,
        )
    )
    return runs


# --------------------------------------------------------------------------- the report


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _cpu(cpu: dict[str, float]) -> str:
    return " · ".join(f"{name} {value:.0f}" for name, value in cpu.items() if not math.isnan(value))


@dataclass(frozen=True, slots=True)
class Verdict:
    c_over_a: float
    c_over_b: float
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
    half_p99 = c.half.percentile_ms(0.99) if c.half is not None else math.nan
    failed = sum(run.peak.failed + (run.half.failed if run.half else 0) for run in runs)
    return Verdict(
        c_over_a=c.peak.rate / by["a"].peak.rate if by["a"].peak.rate else math.nan,
        c_over_b=c.peak.rate / by["b"].peak.rate if by["b"].peak.rate else math.nan,
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
                    _ms(sample.percentile_ms(0.5)),
                    _ms(sample.percentile_ms(0.99)),
                    str(sample.failed),
                    _cpu(cpu),
                )
            )
    return out


HEADERS = ("server", "deliveries/s", "p50 ms", "p99 ms", "not 204", "CPU, % of one core")


#: CPU of other processes, in % of one core, above which a run is reported as contended.
CONTENDED_PERCENT = 20.0


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


def summary_lines(v: Verdict) -> list[str]:
    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return [
        f"c/a = {v.c_over_a:.2f}",
        f"c/b = {v.c_over_b:.2f} (target >= {TARGET_C_OVER_B}: {met(v.ratio_met)})",
        f"p99 at half of c's peak ({v.half_rate:,.0f}/s) = {_ms(v.half_p99_ms)} ms "
        f"(target < {TARGET_P99_MS:g} ms: {met(v.latency_met)}); the load generator sent "
        f"those requests up to {_ms(v.half_lag_p99_ms)} ms after their scheduled time (p99), "
        "which the latency includes",
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
        style = "red" if "NOT met" in line else ""
        console.print(f"[{style}]{line}[/]" if style else line)
    for note in (generator_bound(runs), contention(runs)):
        if note:
            console.print(f"[yellow]{note}[/]")
    if v.failed:
        console.print(
            f"[bold white on red] INVALID RUN: {v.failed} requests were not answered 204; "
            "the figures above do not measure successful deliveries [/]"
        )


def markdown(
    runs: list[Run], v: Verdict, opts: Options, about: list[tuple[str, str]], pool_note: str
) -> str:
    today = datetime.now(UTC).date().isoformat()
    command = "python -m bench.ingest" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    lines = [f"# Ingest benchmark, {today}", ""]
    if v.failed:
        lines += [
            f"**INVALID RUN: {v.failed} requests were not answered 204.**",
            "",
        ]
    lines += [
        "| " + " | ".join(HEADERS) + " |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
        *("| " + " | ".join(row) + " |" for row in rows(runs)),
        "",
        *(f"- {line}" for line in summary_lines(v)),
        *([f"- {note}"] if (note := generator_bound(runs)) else []),
        *([f"- **{note}**"] if (note := contention(runs)) else []),
        "",
        "## How",
        "",
        f"- command: `{command}` (from the repository root; `make bench` runs the same)",
        f"- load: one asyncio + aiohttp client process, {opts.concurrency} keep-alive "
        f"connections; closed loop for {opts.warmup_s:g} s warm-up + {opts.duration_s:g} s "
        f"measured per server; then (c) open loop at half its peak for {opts.duration_s:g} s, "
        "latency from each request's scheduled send time",
        "- deliveries: AgentMail `message.received` events (~1.4 KB) over 1024 threads, "
        "every body distinct, signed up front with `svix.webhooks.Webhook.sign`" + pool_note,
        f"- broker: warmed up for {opts.broker_warmup_s:g} s of produce load before any "
        "measurement (JIT); (c) produces to `onceonly-bench.deliveries`, "
        f"{opts.partitions} partitions",
        "- servers, each its own process: (a) aiohttp handler reading the body, 204; "
        "(b) the same + `ingest.verify.verify_svix`; (c) `onceonly ingest` "
        "(log level WARNING), acks=all, idempotent producer",
        "- CPU column: CPU time over the measured window of the server, the load generator "
        "(`load`), the Kafka JVM (`broker`) and everything else on the machine (`other`: "
        "other processes, kernel work not charged to ours), in % of one core; `other` well "
        "above zero means the figures did not have the CPUs to themselves",
        "",
        "## Machine",
        "",
        *(f"- {name}: {value}" for name, value in about),
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])
    except OSError:
        return "unknown"


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--duration",
    type=click.FloatRange(1, 60),
    default=10.0,
    show_default=True,
    help="Measured seconds per closed loop, and of the open loop.",
)
@click.option(
    "--warmup",
    type=click.FloatRange(0, 30),
    default=2.0,
    show_default=True,
    help="Unmeasured seconds before each closed loop.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=64,
    show_default=True,
    help="Keep-alive connections (and workers) of the load generator.",
)
@click.option(
    "--pool",
    type=click.IntRange(100, 200_000),
    default=30_000,
    show_default=True,
    help="Distinct signed deliveries per closed loop (reused in turn if the loop sends more).",
)
@click.option(
    "--broker-warmup",
    type=click.FloatRange(0, 60),
    default=8.0,
    show_default=True,
    help="Seconds of produce load on the broker before any server is measured (JIT warm-up).",
)
def main(duration: float, warmup: float, concurrency: int, pool: int, broker_warmup: float) -> None:
    """Deliveries/s and p50/p99 of (a) bare aiohttp, (b) + svix verify, (c) onceonly ingest."""
    from onceonly.errors import OnceOnlyError
    from onceonly.settings import Settings

    load_before = _loadavg()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        opts = Options(
            duration_s=duration,
            warmup_s=warmup,
            concurrency=concurrency,
            pool=pool,
            broker_warmup_s=broker_warmup,
            partitions=Settings.from_env().partitions,
        )
        with tempfile.TemporaryDirectory(prefix="onceonly-bench-") as tmp:
            work = Path(tmp)
            with kafka(work) as (bootstrap, kafka_about):
                topics = create_topics(bootstrap, opts.partitions)
                if broker_warmup > 0:
                    console.print(f"warming the broker up for {broker_warmup:g} s …")
                    warm_broker(bootstrap, topics["ONCEONLY_DELIVERIES_TOPIC"], broker_warmup)
                runs = asyncio.run(run_all(opts, work, bootstrap, topics))
    except KeyboardInterrupt:
        console.print("[red]interrupted: every server and the broker are stopped[/]")
        sys.exit(130)
    except (BenchError, OnceOnlyError) as exc:
        console.print(f"[red]bench: {exc}[/]")
        sys.exit(1)

    v = verdict(runs)
    print_report(runs, v)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"ingest-{datetime.now(UTC).date().isoformat()}.md"
    about = [
        *machine(kafka_about),
        ("load average (1, 5, 15 min)", f"{load_before} at the start, {_loadavg()} at the end"),
    ]
    wrapped = [run.label for run in runs if run.peak.pool_wrapped]
    pool_note = (
        f" (the {opts.pool} of a closed loop were reused in turn by {', '.join(wrapped)})"
        if wrapped
        else ""
    )
    out.write_text(markdown(runs, v, opts, about, pool_note), encoding="utf-8")
    console.print(f"written to {out.relative_to(ROOT)}")
    if v.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

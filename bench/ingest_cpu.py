"""Where ingest's CPU per delivery goes: (b) and ingest variants under wrk, by thread.

``python -m bench.ingest_cpu`` starts a broker (as ``python -m bench.ingest`` does, warmed
up the same way), then, for ``--rounds`` rounds, measures (b) (bare aiohttp + svix, the
target's baseline; ``--no-baseline`` skips it) and each ``--variant`` (:mod:`bench._variants`;
default: this checkout's ingest) in turn, each in a process of its own under the same wrk
closed loop as ``bench.ingest``. Interleaving the variants in rounds puts each before/after
pair on the same machine load, which is what a noisy shared machine needs.

Per run it prints deliveries/s, p50/p99, and µs of CPU per delivery of the server by
thread group (:mod:`bench._threads`: the event loop, librdkafka's main and broker
threads), and of the broker. ``--py-spy DIR`` adds a round, after the measured ones, in
which py-spy records each variant's threads (``--native``; raw collapsed stacks, one file
per variant): the CPU figures of that round include py-spy's pauses and are not printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from bench._load import sign_pool, webhook_secret
from bench._proc_stack import ingest_env
from bench._procs import Broker, CpuWindow, ServerProcess, console, create_topics, kafka
from bench._servers import ROUTE, local_url
from bench._threads import GROUPS, per_delivery_us, thread_seconds
from bench._variants import Variant, ingest_argv, parse_variant
from bench._wrk import WrkLoad, wrk_closed_loop
from bench.ingest import BENCH_TOPIC_PREFIX, server_env, warm_broker


class ThreadWindow(CpuWindow):
    """A :class:`CpuWindow` that also reads the server's threads at its begin and end, and
    may run py-spy on the server for the window."""

    def __init__(self, pids: dict[str, int | None], server: int, spy: Path | None) -> None:
        super().__init__(pids)
        self.server = server
        self.spy = spy
        self.before: dict[int, tuple[str, float]] = {}
        self.after: dict[int, tuple[str, float]] = {}
        self._spy: subprocess.Popen[bytes] | None = None

    async def measure(self, after_s: float, for_s: float) -> None:
        await asyncio.sleep(after_s)
        if self.spy is not None:
            self._spy = subprocess.Popen(
                profiler_argv(self.spy, self.server, for_s),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        self.before = thread_seconds(self.server)
        self.begin()
        await asyncio.sleep(for_s)
        self.end()
        self.after = thread_seconds(self.server)
        if self._spy is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._spy.wait)


def profiler_argv(out: Path, pid: int, seconds: float) -> list[str]:
    """py-spy's (``out`` ends .txt: raw collapsed stacks of the Python threads, native frames
    included) or perf's (``out`` ends .perf: every thread, librdkafka's too, 499 Hz)."""
    if out.suffix == ".perf":
        perf = ("perf", "record", "-F", "499", "-g", "-p", str(pid), "-o", str(out))
        return [*perf, "--", "sleep", str(int(seconds))]
    spy = str(Path(sys.executable).parent / "py-spy")
    return [
        *(spy, "record", "--native", "--threads", "--rate", "250", "--format", "raw"),
        *("--duration", str(int(seconds)), "--pid", str(pid), "-o", str(out)),
    ]


async def one_run(
    name: str,
    server: ServerProcess,
    port: int,
    secret: str,
    broker: Broker,
    opts: dict[str, float],
    spy: Path | None,
) -> dict[str, float]:
    """One closed loop against ``server``: its figures, or {} when profiled."""
    base = local_url(port)
    with server:
        await server.wait_ready(f"{base}/healthz")
        pool = sign_pool(secret, int(opts["pool"]))
        others: dict[str, int | None] = {"broker": broker.pid} if broker.pid else {}
        window = ThreadWindow({"server": server.pid, "load": None, **others}, server.pid, spy)
        load = WrkLoad(int(opts["concurrency"]))
        sample = await wrk_closed_loop(
            base + ROUTE,
            pool,
            load,
            warmup_s=opts["warmup"],
            duration_s=opts["duration"],
            window=window,
        )
        pid = server.pid
    if spy is not None:
        console.print(f"{name}: the profiler wrote {spy}")
        return {}
    delivered = sample.rate * opts["duration"]
    figures = per_delivery_us(window.before, window.after, pid, delivered)
    figures["rate"] = sample.rate
    figures["p50"] = sample.percentile_ms(0.5)
    figures["p99"] = sample.percentile_ms(0.99)
    figures["failed"] = float(sample.failed)
    for part, key in (("broker", "broker"), ("other", "machine")):
        if part in window.percent:
            figures[key] = 1e4 * window.percent[part] / max(sample.rate, 1e-9)
    threads = " ".join(f"{g} {figures[g]:.0f}" for g in GROUPS)
    console.print(
        f"{name}: {sample.rate:,.0f}/s p50 {figures['p50']:.2f} ms p99 {figures['p99']:.2f} ms"
        f" | server {figures['total']:.0f} µs ({threads}) broker {figures.get('broker', 0):.0f}"
        f" machine {figures.get('machine', 0):.0f} µs" + (" FAILED" if sample.failed else "")
    )
    return figures


def baseline_server(secret: str, port: int, work: Path) -> ServerProcess:
    argv = [sys.executable, "-m", "bench._servers", "svix", "--port", str(port)]
    return ServerProcess("(b)", argv, server_env(secret, {}), work / "b.log")


def ingest_server(
    variant: Variant, secret: str, port: int, broker: Broker, topics: dict[str, str], work: Path
) -> ServerProcess:
    env = ingest_env(broker.bootstrap, 8, port, work, topics, **variant.env)
    argv = ingest_argv(sys.executable, variant)
    return ServerProcess(variant.name, argv, server_env(secret, env), work / f"{variant.name}.log")


async def run_rounds(
    variants: list[Variant],
    baseline: bool,
    rounds: int,
    opts: dict[str, float],
    broker: Broker,
    topics: dict[str, str],
    work: Path,
    spy_dir: Path | None,
    suffix: str = ".txt",
) -> dict[str, list[dict[str, float]]]:
    from devstack.ports import free_port

    secret = webhook_secret()
    results: dict[str, list[dict[str, float]]] = {}
    names = (["b"] if baseline else []) + [v.name for v in variants]
    plan: list[tuple[str, Path | None]] = [(n, None) for _ in range(rounds) for n in names]
    if spy_dir is not None:
        plan += [(n, spy_dir / f"{n}{suffix}") for n in names]
    by_name = {v.name: v for v in variants}
    for name, spy in plan:
        port = free_port()
        if name == "b":
            server = baseline_server(secret, port, work)
        else:
            server = ingest_server(by_name[name], secret, port, broker, topics, work)
        figures = await one_run(name, server, port, secret, broker, opts, spy)
        if figures:
            results.setdefault(name, []).append(figures)
    return results


def summary(results: dict[str, list[dict[str, float]]]) -> None:
    """Medians over the rounds, and each variant's total over (b)'s, round by round."""
    keys = ("rate", "p50", "p99", "total", *GROUPS, "broker", "machine")
    console.print("\nmedians over the rounds (µs per delivery; p50/p99 in ms):")
    console.print("variant " + " ".join(f"{k:>10}" for k in keys) + "   c/b")
    base = [r["total"] for r in results.get("b", [])]
    for name, runs in results.items():
        medians = [statistics.median(r.get(k, float("nan")) for r in runs) for k in keys]
        ratio = ""
        if base and name != "b":
            ratios = [r["total"] / b for r, b in zip(runs, base, strict=False)]
            ratio = f"{statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})"
        console.print(f"{name:8}" + " ".join(f"{m:10.1f}" for m in medians) + "   " + ratio)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--variant",
    "specs",
    multiple=True,
    help="NAME[@DIR][,VAR=VALUE...] (repeatable); default: 'c', this checkout's ingest.",
)
@click.option("--rounds", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option("--duration", type=click.FloatRange(1, 60), default=10.0, show_default=True)
@click.option("--warmup", type=click.FloatRange(0, 30), default=2.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 256), default=64, show_default=True)
@click.option("--pool", type=click.IntRange(100, 200_000), default=30_000, show_default=True)
@click.option("--broker-warmup", type=click.FloatRange(0, 60), default=8.0, show_default=True)
@click.option("--no-baseline", is_flag=True, help="Skip (b).")
@click.option(
    "--py-spy",
    "spy_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also profile each variant once with py-spy, into this directory.",
)
@click.option("--perf", is_flag=True, help="With --py-spy: profile with perf instead.")
def main(
    specs: tuple[str, ...],
    rounds: int,
    duration: float,
    warmup: float,
    concurrency: int,
    pool: int,
    broker_warmup: float,
    no_baseline: bool,
    spy_dir: Path | None,
    perf: bool,
) -> None:
    """(b) and ingest variants under wrk, in rounds: CPU per delivery by thread."""
    try:
        variants = [parse_variant(s) for s in specs] or [Variant("c")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--variant") from exc
    if spy_dir is not None:
        spy_dir.mkdir(parents=True, exist_ok=True)
    opts = {"duration": duration, "warmup": warmup, "concurrency": concurrency, "pool": pool}
    with tempfile.TemporaryDirectory(prefix="onceonly-cpu-") as tmp, kafka(Path(tmp)) as broker:
        topics = create_topics(broker.bootstrap, 8, BENCH_TOPIC_PREFIX)
        if broker_warmup > 0:
            console.print(f"warming the broker up for {broker_warmup:g} s …")
            warm_broker(broker.bootstrap, topics["ONCEONLY_DELIVERIES_TOPIC"], broker_warmup)
        with contextlib.suppress(KeyboardInterrupt):
            results = asyncio.run(
                run_rounds(
                    variants,
                    not no_baseline,
                    rounds,
                    opts,
                    broker,
                    topics,
                    Path(tmp),
                    spy_dir,
                    ".perf" if perf else ".txt",
                )
            )
            summary(results)


if __name__ == "__main__":
    main()

"""Where ingest's CPU per delivery goes (``python -m bench.ingest_cpu``): (b) and ingest
variants (:mod:`bench._options`) under wrk, interleaved in rounds, µs per delivery by
thread group; ``--py-spy DIR`` adds a profiled round."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

import click

from bench._load import sign_pool, webhook_secret
from bench._options import Float, Int, Opt, Values, Variant, parse_variant
from bench._procs import (
    GROUPS,
    Broker,
    CpuWindow,
    ServerProcess,
    console,
    per_delivery_us,
    thread_seconds,
)
from bench._runner import Scenario, command
from bench._servers import ROUTE, local_url
from bench._wrk import WrkLoad, wrk_closed_loop
from bench.ingest import baseline_server, ingest_server, warmed_topics


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
    opts: Values,
    spy: Path | None,
) -> dict[str, float]:
    """One closed loop against ``server``: its figures, or {} when profiled."""
    base = local_url(port)
    with server:
        await server.wait_ready(f"{base}/healthz")
        pool = sign_pool(secret, opts.pool)
        others: dict[str, int | None] = {"broker": broker.pid} if broker.pid else {}
        window = ThreadWindow({"server": server.pid, "load": None, **others}, server.pid, spy)
        load = WrkLoad(opts.concurrency)
        sample = await wrk_closed_loop(
            base + ROUTE, pool, load, warmup_s=opts.warmup, duration_s=opts.duration, window=window
        )
        pid = server.pid
    if spy is not None:
        console.print(f"{name}: the profiler wrote {spy}")
        return {}
    delivered = sample.rate * opts.duration
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


async def run_rounds(
    opts: Values, broker: Broker, topics: dict[str, str], work: Path
) -> dict[str, list[dict[str, float]]]:
    from devstack.ports import free_port

    secret = webhook_secret()
    results: dict[str, list[dict[str, float]]] = {}
    names = ([] if opts.no_baseline else ["b"]) + [v.name for v in opts.variants]
    plan: list[tuple[str, Path | None]] = [(n, None) for _ in range(opts.rounds) for n in names]
    if opts.spy_dir is not None:
        suffix = ".perf" if opts.perf else ".txt"
        plan += [(n, opts.spy_dir / f"{n}{suffix}") for n in names]
    by_name = {v.name: v for v in opts.variants}
    for name, spy in plan:
        port = free_port()
        if name == "b":
            server = baseline_server("b", "svix", secret, work, port)
        else:
            variant = by_name[name]
            server = ingest_server(secret, broker.bootstrap, topics, 8, work, port, variant=variant)
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


def _variants(_ctx: object, _param: object, specs: tuple[str, ...]) -> list[Variant]:
    try:
        return [parse_variant(s) for s in specs] or [Variant("c")]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


OPTIONS = (
    Opt(
        "--variant",
        help="NAME[@DIR][,VAR=VALUE...] (repeatable); default: 'c', this checkout's ingest.",
        dest="variants",
        multiple=True,
        callback=_variants,
    ),
    Opt("--rounds", Int(1, 50), 3),
    Opt("--duration", Float(1, 60), 10.0),
    Opt("--warmup", Float(0, 30), 2.0),
    Opt("--concurrency", Int(1, 256), 64),
    Opt("--pool", Int(100, 200_000), 30_000),
    Opt("--broker-warmup", Float(0, 60), 8.0),
    Opt("--no-baseline", help="Skip (b).", flag=True),
    Opt(
        "--py-spy",
        click.Path(file_okay=False, path_type=Path),
        help="Also profile each variant once with py-spy, into this directory.",
        dest="spy_dir",
    ),
    Opt("--perf", help="With --py-spy: profile with perf instead.", flag=True),
)


def collect(opts: Values, broker: Broker, work: Path) -> None:
    if opts.spy_dir is not None:
        opts.spy_dir.mkdir(parents=True, exist_ok=True)
    topics = warmed_topics(broker, 8, opts.broker_warmup)
    summary(asyncio.run(run_rounds(opts, broker, topics, work)))


main = command(
    Scenario("ingest-cpu", "", OPTIONS, Values, collect),
    "(b) and ingest variants under wrk, in rounds: CPU per delivery by thread.",
)


if __name__ == "__main__":
    main()

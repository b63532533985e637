"""Ingest's latency against its arrival rate (``python -m bench.ingest_latency --rates
1000,2000``): the open loop at each rate, with percentiles, the generator's lateness, CPU
by thread group, steal, and ingest's own p99."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import click

from bench._load import percentile, webhook_secret
from bench._openloop import build_generator
from bench._options import Float, Int, Opt, Values
from bench._proc_stack import histogram_buckets, scrape
from bench._procs import BenchError, Broker, console, per_delivery_us, thread_seconds
from bench._report import verdict_table
from bench._runner import Scenario, command
from bench._servers import local_url
from bench.ingest import fixed_rate, ingest_server, warmed_topics

COLUMNS = (
    "rate/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "queued late", "sent late",
    "loop µs", "rdkafka µs", "ingest %", "broker %", "load %", "steal %", "loop waited %",
    "ingest p99 ≤ ms",
)  # fmt: skip


#: ingest's own view of its latency, handler start to broker ack
METRIC = "onceonly_ack_latency_seconds"

#: upper bound (seconds) -> deliveries at or under it, summed over providers
Buckets = dict[float, float]


def quantile_bound(before: Buckets, after: Buckets, q: float) -> float:
    """The upper bound, in seconds, of the bucket holding quantile ``q`` of the deliveries
    acknowledged between two scrapes: ``inf`` past the last finite bucket, NaN for none."""
    counts = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return math.nan
    return next(bound for bound, count in counts if count >= q * total)


def acks(port: int) -> Buckets:
    """The histogram of the ingest on ``port`` now."""
    found = scrape(port)
    if found is None:
        raise BenchError(f"ingest's /metrics did not answer on port {port}")
    return dict(histogram_buckets(found, METRIC))


def _rates(value: str) -> list[float]:
    try:
        rates = [float(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: rates are numbers, comma-separated") from exc
    if not rates or min(rates) <= 0:
        raise click.BadParameter(f"{value!r}: give at least one rate, each above 0")
    return rates


def collect(opts: Values, broker: Broker, work: Path) -> None:
    topics = warmed_topics(broker, opts.partitions, opts.broker_warmup)
    print_rows(asyncio.run(_sweep(broker, topics, work, opts)))


async def _sweep(
    broker: Broker, topics: dict[str, str], work: Path, opts: Values
) -> list[tuple[str, ...]]:
    from devstack.ports import free_port

    secret = webhook_secret()
    generator = build_generator(work)
    port = free_port()
    server = ingest_server(secret, broker.bootstrap, topics, opts.partitions, work, port)
    if opts.linger >= 0:
        server.env["ONCEONLY_PRODUCE_LINGER_MS"] = str(opts.linger)
    base = local_url(port)
    rows = []
    with server:
        await server.wait_ready(f"{base}/healthz")
        for rate in opts.rates:
            before_acks = acks(port)  # before the CPU is read: the scrape is not a delivery
            before = thread_seconds(server.pid)
            sample, cpu = await fixed_rate(
                server, base, secret, generator, rate=rate, duration_s=opts.duration,
                connections=opts.connections, others={"broker": broker.pid},
            )  # fmt: skip
            us = per_delivery_us(before, thread_seconds(server.pid), server.pid, sample.ok)
            own_p99_ms = quantile_bound(before_acks, acks(port), 0.99) * 1000
            ms = [sample.percentile_ms(q) for q in (0.5, 0.9, 0.99, 0.999, 1.0)]
            late = [
                percentile(lags, 0.99) * 1000 for lags in (sample.dispatch_lag, sample.send_lag)
            ]
            share = [cpu.percent.get(name, float("nan")) for name in ("server", "broker", "load")]
            share += [cpu.steal, cpu.waited.get("server", float("nan"))]
            rows.append(
                (
                    f"{rate:,.0f}",
                    *(f"{m:.2f}" for m in ms),
                    *(f"{lag:.2f}" for lag in late),
                    f"{us['loop']:.0f}",
                    f"{us['rdk:main'] + us['rdk:broker']:.0f}",
                    *(f"{p:.0f}" for p in share[:3]),
                    *(f"{p:.1f}" for p in share[3:]),
                    f"{own_p99_ms:g}",
                )
            )
            failed = f", {sample.failures()}" if sample.failed else ""
            console.print(f"{rate:,.0f}/s: p99 {ms[2]:.2f} ms{failed}")
    return rows


def print_rows(rows: list[tuple[str, ...]]) -> None:
    console.print("\n".join(verdict_table(COLUMNS, rows, verdict=False)), markup=False)
    console.print(
        "queued late, sent late: p99 ms after the scheduled time, of the generator's own "
        "queueing and of the send (after the wait for a free connection); µs: CPU per "
        "delivery of ingest's event loop and of librdkafka's threads; %: of one core, over "
        "the measured window (load: the generator; steal: what the host took from this "
        "machine's CPUs); loop waited: % of the window ingest's event loop was ready to run "
        "but waited for a CPU; ingest p99: the upper bound of the bucket of ingest's own "
        "ack-latency histogram that holds its p99, from the handler's start to the broker's "
        "ack"
    )


OPTIONS = (
    Opt("--rates", None, "1000,2000,3000,3500", "Rates, /s.", callback=lambda _c, _p, v: _rates(v)),
    Opt("--duration", Float(1, 120), 10.0),
    Opt("--connections", Int(1, 1024), 64),
    Opt("--partitions", Int(1, 64), 8),
    Opt(
        "--linger",
        int,
        -1,
        "ONCEONLY_PRODUCE_LINGER_MS for ingest (default: the setting's own default).",
    ),
    Opt("--broker-warmup", Float(0, 60), 8.0),
)
main = command(
    Scenario("ingest-latency", "", OPTIONS, Values, collect),
    "Ingest's latency at each of --rates (open loop), with its CPU per delivery.",
)


if __name__ == "__main__":
    main()

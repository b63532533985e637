"""Agent-step benchmark (``python -m bench.agent_step``, ``make bench-agent``): ingest and a
worker with a model-like writer (1 s ± 20 %) behind the reorder window, at a steady
rate; (B) with some messages hanging in the writer; (C) ``--instant``: CPU per reply.

Targets: replies/s >= 0.8 x concurrency / 1.0 s, p99 <= window + 1.2 s + 1 s, (B)'s p99
<= 1.1 x (A)'s. Report: ``<--out>/agent-step-<date>.md``; docs/benchmarks.md describes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench._agent_load import Run, Setup, run
from bench._model import LATENCY_S
from bench._options import Float, Int, Opt, Values, with_partitions
from bench._proc_phases import Bench
from bench._proc_records import agentmail_records, produce
from bench._procs import Broker, console
from bench._report import contended, fmt, fmt_cpu, met, verdict_report
from bench._runner import Scenario, command

MEAN_WRITER_S = sum(LATENCY_S) / 2
#: Writer timeout and attempts in (A) and (B), so that a hanging call ends in seconds.
TIMEOUT_S, ATTEMPTS = 5.0, 2
#: Seconds (A) or (B) waits after its load for the last replies.
TAIL_S = 90.0


def worker_settings(opts: Values) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "bench._model:writer",
        "ONCEONLY_REORDER_WINDOW_MS": str(opts.window_ms),
        "ONCEONLY_WRITER_CONCURRENCY": str(opts.concurrency),
        "ONCEONLY_WRITER_TIMEOUT_S": f"{TIMEOUT_S:g}",
        "ONCEONLY_WRITER_ATTEMPTS": str(ATTEMPTS),
    }


@dataclass(slots=True)
class Results:
    a: Run | None = None
    b: Run | None = None
    instant_ms: float = math.nan
    instant_rate: float = math.nan
    instant_cpu: str = ""


def run_agent(opts: Values, broker: Broker, work: Path, label: str, fraction: float) -> Run:
    """(A) or (B): the steady load through ingest and the worker (:func:`bench._agent_load.run`),
    ``fraction`` of the messages hanging."""
    count = int(opts.rate * opts.duration_s)
    settings = worker_settings(opts)
    setup = Setup(
        label, opts.rate, count, opts.partitions, settings, tail_s=TAIL_S, hang_fraction=fraction
    )
    result = run(setup, broker, work)
    console.print(f"({label}) {result.cpu_ms_per_reply():.2f} ms of worker CPU per reply")
    return result


def run_instant(opts: Values, broker: Broker, work: Path, r: Results) -> None:
    """(C) the worker's CPU per reply with the instant writer, window 0 (bench.processors)."""
    bench = Bench.fresh(broker, work, "instant", opts.partitions)
    count = opts.instant_count
    with bench.running():
        produce(broker.bootstrap, bench.deliveries, agentmail_records(count), count)
        bench.start_mail()
        console.print(f"(C) instant writer, window 0, {count:,} records produced to Kafka …")
        drain = bench.run_replies(count)
    r.instant_ms, r.instant_rate, r.instant_cpu = drain.cpu_ms, drain.rate, fmt_cpu(drain.cpu)
    console.print(f"(C) {drain.rate:,.0f} replies/s, {drain.cpu_ms:.2f} ms of CPU per reply")


def rows(opts: Values, r: Results) -> list[tuple[str, str, str, str, str]]:
    """(figure, A, B, target, verdict) rows."""
    runs = [x for x in (r.a, r.b) if x is not None]
    replies_target = 0.8 * opts.concurrency / MEAN_WRITER_S
    p99_target_s = opts.window_ms / 1000 + LATENCY_S[1] + 1.0

    def both(get: Callable[[Run], str]) -> tuple[str, str]:
        a = get(r.a) if r.a is not None else ""
        b = get(r.b) if r.b is not None else ""
        return a, b

    def verdicts(ok: Callable[[Run], bool]) -> str:
        return ", ".join(f"{x.label}: {met(ok(x))}" for x in runs)

    out = [
        (
            "messages offered (hanging)",
            *both(lambda x: f"{len(x.messages):,} ({x.hanging})"),
            "",
            "",
        ),
        ("204 from ingest", *both(lambda x: f"{len(x.offered.acked):,}"), "", ""),
        (
            "replies/s per worker",
            *both(lambda x: fmt(x.replies_per_s, ".1f")),
            f">= {replies_target:.1f}",
            verdicts(lambda x: x.replies_per_s >= replies_target),
        ),
        ("p50 204 → reply, s", *both(lambda x: fmt(x.p(0.5), ".2f")), "", ""),
        (
            "p99 204 → reply, s",
            *both(lambda x: fmt(x.p(0.99), ".2f")),
            f"<= {p99_target_s:.1f}",
            verdicts(lambda x: x.p(0.99) <= p99_target_s),
        ),
    ]
    if r.a is not None and r.b is not None:
        ratio = r.b.p(0.99) / r.a.p(0.99)
        out.append(("p99 B / A", "", fmt(ratio, ".3f"), "<= 1.10", met(ratio <= 1.10)))
    out += [
        (
            "unanswered (not hanging)",
            *both(lambda x: str(x.unanswered)),
            "0",
            verdicts(lambda x: x.unanswered == 0),
        ),
        ("hanging messages answered", *both(lambda x: str(x.hang_answered)), "0", ""),
        ("worker CPU per reply, ms", *both(lambda x: fmt(x.cpu_ms_per_reply(), ".2f")), "", ""),
    ]
    if not math.isnan(r.instant_ms):
        out.append(
            ("(C) instant writer, worker CPU per reply, ms", fmt(r.instant_ms, ".2f"), "", "", "")
        )
    return out


def notes(opts: Values, r: Results) -> list[str]:
    lines = [
        "settings of (A) and (B): "
        + ", ".join(f"{k}={v}" for k, v in worker_settings(opts).items())
        + f", {opts.partitions} partitions, worker log level INFO. The writer timeout and attempts "
        f"are lowered from their defaults (120 s, 3) so that a hanging call is dead-lettered "
        f"after {ATTEMPTS} calls of {TIMEOUT_S:g} s plus a backoff, and the run stays short",
        f"load: open loop at {opts.rate:g}/s for {opts.duration_s:g} s, every delivery a "
        "distinct message in its own thread, svix-signed, POSTed to ingest; latency from the "
        "204 to the instant mail server receiving the reply (both on this machine's clock)",
        f"target replies/s = 0.8 x {opts.concurrency} / {MEAN_WRITER_S:g} s; it can only be met "
        "if the offered rate is above it",
    ]
    for x in (r.a, r.b):
        if x is None:
            continue
        failures = {s: n for s, n in x.offered.statuses.items() if s != "204"}
        counters = ", ".join(f"{k} = {v:g}" for k, v in sorted(x.metrics.items()))
        lines.append(
            f"({x.label}) CPU over the run, % of one core: {fmt_cpu(x.cpu)}; generator's worst "
            f"send lag {x.offered.max_send_lag_s * 1000:.0f} ms; non-204 answers: "
            f"{failures or 'none'}; worker counters: {counters or 'n/a'}"
        )
    others = (x.cpu.get("other", 0.0) for x in (r.a, r.b) if x is not None)
    when = "during (A) or (B) (`other` in the CPU figures)"
    if note := contended(others, when, "latencies may be higher than on an idle machine"):
        lines.append(note)
    if not math.isnan(r.instant_ms):
        lines.append(
            "(C) `onceonly.processors.writer:acknowledge`, window 0, "
            f"{opts.instant_count:,} records "
            f"produced straight to Kafka (as `bench.processors` (2)): {r.instant_rate:,.0f} "
            f"replies/s; CPU, % of one core: {r.instant_cpu}"
        )
    return lines


HEADERS = ("figure", "A (no hangs)", "B (hangs)", "target", "")


def report_lines(opts: Values, r: Results) -> list[str]:
    return verdict_report(HEADERS, rows(opts, r), notes(opts, r))


def collect(opts: Values, broker: Broker, work: Path) -> Results:
    r = Results()
    r.a = run_agent(opts, broker, work, "A", 0.0)
    r.b = run_agent(opts, broker, work, "B", opts.hang_fraction)
    if opts.instant:
        run_instant(opts, broker, work, r)
    return r


OPTIONS = (
    Opt("--rate", Float(1, 1000), help="Offered deliveries/s", sizes=(55.0, 20.0)),
    Opt(
        "--duration",
        Float(1, 600),
        help="Seconds of load per run",
        dest="duration_s",
        sizes=(60.0, 15.0),
    ),
    Opt("--hang-fraction", Float(0, 0.5), 0.01),
    Opt("--window-ms", Int(0, 60_000), 2000),
    Opt("--concurrency", Int(1, 1024), 64),
    Opt("--instant/--no-instant", None, True, "Run (C)."),
    Opt("--instant-count", Int(100, 100_000), help="(C) records", sizes=(2000, 500)),
)
AGENT_STEP = Scenario(
    "agent-step",
    "Agent-step benchmark",
    OPTIONS,
    with_partitions,
    collect,
    report_lines,
    smoke="A small quick run (rate 20/s, 15 s, 500 records).",
)
main = command(
    AGENT_STEP,
    "Replies/s and 204-to-reply latency with a model-like writer, then with hanging calls.",
)


if __name__ == "__main__":
    main()

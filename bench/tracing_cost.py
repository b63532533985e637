"""What tracing costs per reply (``python -m bench.tracing_cost``, ``make bench-tracing``):
(1) the span path alone in this process, (2) the whole stack, OpenTelemetry off and on
in turn; "on" as ratios to "off". Report: ``<--out>/tracing-<date>.md``."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._agent_load import Run, Setup, run
from bench._options import Float, Int, Opt, Values, with_partitions
from bench._proc_stack import get_json, serve
from bench._procs import Broker, console
from bench._report import fmt_cpu, verdict_table
from bench._runner import Scenario, command
from onceonly.foundation import tracing


@dataclass(slots=True)
class Results:
    path_us: dict[str, float] = field(default_factory=dict)  #: (1): "off", "on"
    runs: dict[str, list[Run]] = field(default_factory=lambda: {"off": [], "on": []})
    spans: dict[int, int] = field(default_factory=dict)  #: id(run) -> spans received


class _Record:
    key = "reply-bench"
    channel = "agentmail"


class _Sender:
    async def reply(self, record: Any) -> str:
        return "<sent@bench>"

    async def find_reply(self, record: Any) -> str | None:
        return None


async def _one_reply(sender: Any) -> None:
    """The tracing calls of one delivery answered once, as ingest and the worker make them."""
    with tracing.delivery("agentmail") as span:
        headers = tracing.with_context([("onceonly-schema", b"envelope/1")])
        tracing.stored("evt_bench", "message.received", "deliveries", 0, 1)
        span.set("http.response.status_code", 204)
    carrier = tracing.carrier(headers)
    with tracing.hold(carrier, "evt_bench") as held:
        held.set("onceonly.verdict", "held")
    with tracing.process([carrier], "agentmail:thr_bench"):
        with tracing.step("dedupe", deliveries=1) as dedupe:
            dedupe.set("onceonly.accepted", 1)
        with tracing.writing("reply-bench"):
            tracing.report_model_call(model="bench", input_tokens=10, output_tokens=5)
        await tracing.traced_sender(sender).reply(_Record())


async def _path_us(calls: int, flush: Any) -> float:
    sender = _Sender()
    for _ in range(min(calls, 200)):  # warm: imports, caches
        await _one_reply(sender)
    flush()
    began = time.process_time()
    for n in range(1, calls + 1):
        await _one_reply(sender)
        if n % 100 == 0:  # the batch processor's queue (2,048 spans) never overflows
            flush()
    flush()
    return 1e6 * (time.process_time() - began) / calls


def span_path(calls: int, receiver: str) -> dict[str, float]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracing.configure("bench", environ={})
    off = asyncio.run(_path_us(calls, lambda: None))
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"{receiver}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracing.configure("bench", provider=provider, environ={})
    try:
        on = asyncio.run(_path_us(calls, provider.force_flush))
    finally:
        tracing.configure("bench", environ={})
        provider.shutdown()
    console.print(f"(1) the span path: off {off:.2f} µs, on {on:.1f} µs per reply")
    return {"off": off, "on": on}


def _received(receiver: str) -> int:
    return sum(get_json(f"{receiver}/_control/spans", timeout_s=10).values())


def collect(opts: Values, broker: Broker, work: Path) -> Results:
    process, port = serve("OTLP receiver", "testkit.fakes.otlp_receiver", work / "otlp.log")
    try:
        return _collect(opts, broker, work, f"http://127.0.0.1:{port}")
    finally:
        process.stop()


def _collect(opts: Values, broker: Broker, work: Path, receiver: str) -> Results:
    r = Results(path_us=span_path(opts.calls, receiver))
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver}
    for n in range(opts.rounds):
        for mode in ("off", "on"):
            env = otel if mode == "on" else {}
            setup = Setup(
                f"{mode}-{n + 1}",
                opts.rate,
                opts.count,
                opts.partitions,
                worker={
                    "ONCEONLY_REPLY_WRITER": "onceonly.processors.writer:acknowledge",
                    "ONCEONLY_REORDER_WINDOW_MS": str(opts.window_ms),
                    **env,
                },
                ingest=env,
            )
            before = _received(receiver)
            done = run(setup, broker, work)
            time.sleep(1.0)  # the processes flush their spans as they stop
            r.runs[mode].append(done)
            r.spans[id(done)] = _received(receiver) - before
    return r


def _mean(runs: list[Run], get: Any) -> float:
    return statistics.fmean(get(x) for x in runs) if runs else float("nan")


def _replies(x: Run) -> int:
    """Replies in a run's receiver window: the measured ones and the warm-up's."""
    return x.answered + 2 * x.partitions


def rows(r: Results) -> list[tuple[str, str, str, str]]:
    """(figure, off, on, on / off)."""

    def line(name: str, get: Any, spec: str) -> tuple[str, str, str, str]:
        off, on = _mean(r.runs["off"], get), _mean(r.runs["on"], get)
        ratio = f"{on / off:.3f}" if off else "n/a"
        return (name, format(off, spec), format(on, spec), ratio)

    out = [
        (
            "(1) the span path, CPU µs per reply",
            f"{r.path_us['off']:.2f}",
            f"{r.path_us['on']:.1f}",
            f"+{r.path_us['on'] - r.path_us['off']:.1f} µs",
        ),
        line("(2) ingest CPU per reply, ms", lambda x: x.cpu_ms_per_reply("ingest"), ".3f"),
        line("(2) worker CPU per reply, ms", lambda x: x.cpu_ms_per_reply("worker"), ".3f"),
        line(
            "(2) ingest + worker CPU per reply, ms",
            lambda x: x.cpu_ms_per_reply("ingest", "worker"),
            ".3f",
        ),
        line("(2) replies/s", lambda x: x.replies_per_s, ".1f"),
        line("(2) p50 204 → reply, s", lambda x: x.p(0.5), ".3f"),
        line("(2) p99 204 → reply, s", lambda x: x.p(0.99), ".3f"),
        line("(2) unanswered", lambda x: x.unanswered, ".0f"),
        line("(2) spans received per reply", lambda x: r.spans[id(x)] / _replies(x), ".2f"),
    ]
    return out


def per_run(r: Results) -> list[str]:
    lines = []
    for mode in ("off", "on"):
        for x in r.runs[mode]:
            lines.append(
                f"{x.label}: {x.answered:,} answered in {x.seconds:.1f} s, "
                f"ingest {x.cpu_ms_per_reply('ingest'):.3f} + worker "
                f"{x.cpu_ms_per_reply('worker'):.3f} ms CPU per reply, p50 "
                f"{x.p(0.5):.3f} s, p99 {x.p(0.99):.3f} s, "
                f"{r.spans[id(x)]:,} spans; CPU % of one core: " + fmt_cpu(x.cpu)
            )
    return lines


def report_lines(opts: Values, r: Results) -> list[str]:
    return [
        *verdict_table(("figure", "off", "on", "on / off"), rows(r), verdict=False),
        "",
        "- off: no TracerProvider and no OTEL_EXPORTER_OTLP_ENDPOINT (every helper returns "
        "the null span; no header is added). on: OTEL_EXPORTER_OTLP_ENDPOINT set for ingest "
        "and the worker, the SDK's batch processor exporting over OTLP/HTTP to a receiver "
        "in a process of its own on loopback (testkit.fakes.otlp_receiver)",
        f"- (1): {opts.calls:,} replies' tracing calls in one process, CPU time including "
        f"the exporter's thread (flushed before the clock stops)",
        f"- (2): {opts.rounds} rounds of off then on, each with fresh topics and processes; "
        f"the instant writer, window {opts.window_ms} ms, {opts.count:,} deliveries at "
        f"{opts.rate:g}/s, {opts.partitions} partitions; figures are the rounds' means",
        *(f"- {line}" for line in per_run(r)),
    ]


OPTIONS = (
    Opt("--rate", Float(1, 1000), 100.0),
    Opt("--count", Int(10, 100_000), 3000),
    Opt("--rounds", Int(1, 10), 2),
    Opt("--window-ms", Int(0, 60_000), 200),
    Opt("--calls", Int(100, 1_000_000), 20_000),
)
TRACING = Scenario("tracing", "Tracing cost", OPTIONS, with_partitions, collect, report_lines)
main = command(TRACING, "Per-reply cost of OpenTelemetry tracing, on against off, in one run.")


if __name__ == "__main__":
    main()

"""A real language model behind ``onceonly.processors.writer.openai`` (``python -m
bench.real_model``, ``make real-model``): SmolLM2-135M in llama-cpp-python's server; the
sample's reply texts, then steady and saturated open loops. Report:
``<--out>/real-model-<date>.md``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench._agent_load import AgentBench, Run, Setup, run
from bench._options import Float, Int, Opt, Values, with_partitions
from bench._proc_stack import poll
from bench._procs import BenchError, Broker, console
from bench._report import fmt, fmt_cpu, verdict_table
from bench._runner import Scenario, command
from devstack import llm
from testkit import samples

WINDOW_MS, CONCURRENCY = 2000, 64  # the agent-step benchmark's
#: the agent-step benchmark's simulated writer (bench._model: 1 s ± 20 %), run (A) of
#: bench/results/agent-step-2026-12-01.md: 55/s offered for 60 s, window 2,000 ms
SIMULATED = {"replies/s": 54.4, "p50 s": 3.30, "p99 s": 3.67, "report": "agent-step-2026-12-01.md"}


@dataclass(slots=True)
class Results:
    build_s: float = 0.0
    sample: dict[str, str] = field(default_factory=dict)  #: replied-to message id -> text
    sample_s: float = 0.0  #: from the sample's POST to its reply
    runs: list[Run] = field(default_factory=list)  #: (M): steady, then saturated


def worker_env(server: llm.ModelServer) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "onceonly.processors.writer.openai:reply",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "local",  # the SDK wants one; the local server reads none
        "OPENAI_MODEL": llm.ALIAS,
        "ONCEONLY_REORDER_WINDOW_MS": str(WINDOW_MS),
        "ONCEONLY_WRITER_CONCURRENCY": str(CONCURRENCY),
    }


def run_sample(broker: Broker, work: Path, server: llm.ModelServer, partitions: int) -> Results:
    """(S): the sample through ingest and a worker; the reply the model wrote."""
    bench = AgentBench.fresh(broker, work, "sample", partitions)
    bench.extra = worker_env(server)
    r = Results()
    with bench.running():
        bench.start_mail()
        bench.start_ingest()
        bench.start_worker()
        story = samples.agentmail_story(bench.secret, copies=3, now=datetime.now(UTC))
        began = time.monotonic()
        posted = asyncio.run(samples.post_all(bench.url_base, story))
        statuses = [p.status for p in posted]
        if set(statuses) != {204}:
            raise BenchError(f"ingest answered the sample with {statuses}")
        r.sample = poll(lambda: bench.control("texts"), bool, 300, 0.5)
        if not r.sample:
            raise BenchError("the sample got no reply in 300 s")
        r.sample_s = time.monotonic() - began
    for message_id, text in r.sample.items():
        console.print(f"\n[bold]the model's reply to {message_id}[/]:\n{text}\n")
    return r


def collect(opts: Values, broker: Broker, work: Path) -> Results:
    started = time.monotonic()
    build_s = llm.build(echo=console.print)
    console.print(f"(0) model server built in {build_s:.0f} s" if build_s else "(0) built already")
    with llm.ModelServer(work / "llm-server.log", threads=opts.threads) as server:
        console.print(f"(0) {llm.ALIAS} served at {server.base_url}")
        r = run_sample(broker, work, server, opts.partitions)
        r.build_s = build_s
        assert server.process is not None
        pids = {"model": server.process.pid}
        for label, rate, count in (
            ("steady", opts.rate, opts.count),
            ("saturated", opts.saturated_rate, opts.saturated_count),
        ):
            if count:
                setup = Setup(
                    label,
                    rate,
                    count,
                    opts.partitions,
                    worker=worker_env(server),
                    tail_s=900.0,
                    pids=pids,
                )
                r.runs.append(run(setup, broker, work))
    console.print(f"done in {time.monotonic() - started:.0f} s")
    return r


def _declined(x: Run) -> int:
    return int(x.metrics.get('onceonly_writer_calls_total{outcome="declined"}', 0))


def measure_lines(opts: Values, runs: list[Run]) -> list[str]:
    """The (M) table: each run of the model beside the simulated writer."""
    cells: list[tuple[str, Callable[[Run], str], object]] = [
        ("offered", lambda x: f"{len(x.messages)} at {x.rate:g}/s", "3,300 at 55/s"),
        (
            "replies/s per worker",
            lambda x: fmt(x.replies_per_s, ".2f"),
            SIMULATED["replies/s"],
        ),
        ("p50 204 → reply, s", lambda x: fmt(x.p(0.5), ".2f"), SIMULATED["p50 s"]),
        ("p99 204 → reply, s", lambda x: fmt(x.p(0.99), ".2f"), SIMULATED["p99 s"]),
        ("declined by the model (NO_REPLY)", lambda x: str(_declined(x)), "-"),
        ("unanswered, not declined", lambda x: str(x.unanswered - _declined(x)), "0"),
        ("model server CPU per reply, ms", lambda x: fmt(x.cpu_ms_per_reply("model"), ".0f"), "-"),
        (
            "worker CPU per reply, ms (idle included)",
            lambda x: fmt(x.cpu_ms_per_reply("worker"), ".1f"),
            "7.77",
        ),
    ]
    names = (f"SmolLM2-135M, {x.label}" for x in runs)
    headers = ("figure", *names, "simulated writer (1 s ± 20 %)")
    rows = [(name, *(cell(x) for x in runs), str(simulated)) for name, cell, simulated in cells]
    lines = [
        "## Replies/s and latency, beside the simulated writer",
        "",
        *verdict_table(headers, rows, verdict=False),
        "",
        f"- the simulated writer's figures are run (A) of `{SIMULATED['report']}`; every "
        f"run: window {WINDOW_MS} ms, writer concurrency {CONCURRENCY}, one worker, the "
        "writer's other settings at their defaults",
        f"- the model server: `python -m llama_cpp.server`, {llm.LLAMA}, {llm.GGUF} "
        f"(from {llm.MODEL_PACKAGE}), {opts.threads} thread(s); it answers one request "
        "at a time, so the worker's calls queue there",
        "- CPU per reply is a process's CPU over the run divided by the replies: at a few "
        "replies a second the worker's figure is mostly its idle loops (ticks, heartbeats, "
        "commits), not the replies; `other` is the rest of the machine (other work on it "
        "takes CPU from the model server too)",
    ]
    for x in runs:
        lines.append(
            f"- {x.label}: CPU over the run, % of one core: "
            + f"{fmt_cpu(x.cpu)}; worker counters: "
            + ", ".join(f"{k} = {v:g}" for k, v in sorted(x.metrics.items()))
        )
    return lines


def report_lines(opts: Values, r: Results) -> list[str]:
    lines = ["## The sample's reply, as the model wrote it", ""]
    for message_id, text in r.sample.items():
        lines += [f"To `{message_id}` ({r.sample_s:.1f} s after the first POST):", ""]
        lines += [f"> {line}" if line else ">" for line in text.splitlines()] + [""]
    if r.runs:
        lines += measure_lines(opts, r.runs)
    lines.append(
        f"- build: {r.build_s:.0f} s (`nice -n 19`, one compiler job)"
        if r.build_s
        else "- build: cached under .run/ before this run (see the README for its time)"
    )
    return lines


OPTIONS = (
    Opt("--rate", Float(0.01, 100), 0.2),
    Opt("--count", Int(0, 10_000), 30),
    Opt("--saturated-rate", Float(0.01, 100), 1.0),
    Opt("--saturated-count", Int(0, 10_000), 60, "0 (and --count 0): the sample only."),
    Opt("--threads", Int(1, 64), 1),
)
REAL_MODEL = Scenario(
    "real-model",
    "A real model behind the openai writer",
    OPTIONS,
    with_partitions,
    collect,
    report_lines,
)
main = command(
    REAL_MODEL,
    "Build and serve a real model, answer the sample with it, measure replies/s and p99.",
)


if __name__ == "__main__":
    main()

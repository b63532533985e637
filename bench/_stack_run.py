"""One run of the whole stack under an open loop: ``onceonly ingest`` and one ``onceonly
worker`` (real processes, fresh topics and app id), the instant mail server, deliveries
POSTed at a steady rate, a share of them hanging in the writer if asked. What
``bench.agent_step``, ``bench.tracing_cost`` and ``bench.real_model`` measure with.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import _agent_load as load
from bench._agent_load import ROUTE, AgentBench, RunResult, build_messages, offer
from bench._procs import Broker, CpuWindow, console


@dataclass(frozen=True, slots=True)
class Setup:
    label: str
    rate: float  #: deliveries/s offered
    count: int  #: deliveries in the measured load
    partitions: int
    worker: dict[str, str] = field(default_factory=dict)  #: the worker's settings
    ingest: dict[str, str] = field(default_factory=dict)  #: more of ingest's environment
    tail_s: float = 90.0  #: how long to wait after the load for the last replies
    warm: bool = True  #: answer a few messages first (the worker has joined its group)
    pids: dict[str, int] = field(default_factory=dict)  #: more processes to take the CPU of
    #: of the messages, those whose writer call hangs until the timeout (not waited for)
    hang_fraction: float = 0.0


@dataclass(slots=True)
class Run:
    result: RunResult
    partitions: int
    seconds: float  #: the measured window: the load and its tail
    #: CPU seconds of each process over the window (worker, ingest, mail, broker, ...)
    cpu_s: dict[str, float]

    def cpu_ms_per_reply(self, *names: str) -> float:
        answered = self.result.answered
        return 1000 * sum(self.cpu_s.get(n, 0.0) for n in names) / answered if answered else 0.0


def run(setup: Setup, broker: Broker, work: Path) -> Run:
    """Start the stack, offer ``setup.count`` deliveries at ``setup.rate``, wait for the
    replies, stop everything; the figures of that window."""
    bench = AgentBench.fresh(broker, work, setup.label, setup.partitions)
    bench.extra, bench.ingest_extra, tag = setup.worker, setup.ingest, bench.tag
    with bench.running():
        bench.start_mail()
        bench.start_ingest()
        bench.start_worker()
        assert bench.worker is not None and bench.ingest is not None
        if setup.warm:
            load.warm_up(bench, tag)
        messages = build_messages(bench.secret, setup.count, tag, setup.hang_fraction)
        ours: dict[str, int | None] = {"ingest": bench.ingest.pid, **setup.pids}
        cpu = CpuWindow(bench.cpu_pids("worker", bench.worker.pid) | ours)
        hanging = sum(m.hang for m in messages)
        console.print(
            f"({setup.label}) {setup.count:,} messages at {setup.rate:g}/s ({hanging} hang) …"
        )
        began = time.perf_counter()
        cpu.begin()
        offered = asyncio.run(offer(bench.url_base + ROUTE, messages, setup.rate))
        want = {m.message_id for m in messages if not m.hang and m.message_id in offered.acked}
        bench.wait_answered(want, timeout_s=setup.tail_s)
        cpu.end()
        seconds = time.perf_counter() - began
        ids = {m.message_id for m in messages}
        received = {k: v for k, v in bench.received().items() if k in ids}
        if hanging:  # the hanging calls' last attempts time out: dead-lettered
            timeout_s = float(setup.worker["ONCEONLY_WRITER_TIMEOUT_S"])
            bench.worker_metric("onceonly_dead_letters_total", 4 * timeout_s, hanging)
        counters = load.worker_counters(bench.worker_port)
    result = RunResult(setup.label, setup.rate, messages, offered, received, cpu.percent)
    result.cpu_seconds = cpu.percent["worker"] / 100 * seconds
    result.settings = setup.worker
    result.metrics = counters
    cpu_s = {name: percent / 100 * seconds for name, percent in cpu.percent.items()}
    console.print(
        f"({setup.label}) {result.replies_per_s:.2f} replies/s, p50 {result.p(0.5):.2f} s, "
        f"p99 {result.p(0.99):.2f} s, {result.unanswered} unanswered"
    )
    return Run(result, setup.partitions, seconds, cpu_s)

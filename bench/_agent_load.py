"""The agent-step benchmark's load, processes and figures (``bench.agent_step`` runs them):
a message's latency is from ingest's 204 to the mail server receiving its reply."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from bench._load import Delivery, per_second, percentile, signed, thread_message, webhook_secret
from bench._model import HANG
from bench._options import Variant
from bench._proc_phases import Bench
from bench._proc_stack import check_alive, counters, scrape
from bench._procs import BenchError, Broker, CpuWindow, ServerProcess, console

ROUTE = "/webhooks/agentmail"
#: The worker's counters a run keeps: its writer calls and dead letters.
COUNTERS = ("onceonly_writer_calls_total", "onceonly_dead_letters_total")
#: The text of a message whose writer call hangs until the timeout.
HANG_TEXT = f"Hi,\n\nplease look into this ({HANG}).\n\nThanks,\nDana"


@dataclass(frozen=True, slots=True)
class Message:
    message_id: str
    hang: bool
    delivery: Delivery


def hangs(count: int, fraction: float) -> set[int]:
    """Which of ``count`` messages hang: evenly spread, ``floor(count * fraction)`` of them."""
    return {i for i in range(count) if math.floor((i + 1) * fraction) > math.floor(i * fraction)}


def build_messages(secret: str, count: int, tag: str, hang_fraction: float) -> list[Message]:
    """``count`` distinct deliveries, each in its own thread, signed now."""
    now = datetime.now(UTC)
    hanging = hangs(count, hang_fraction)
    out: list[Message] = []
    for n in range(count):
        message_id, body = thread_message(tag, n, now, HANG_TEXT if n in hanging else None)
        delivery = signed(secret, body, f"msg_{tag}_{n:06d}", now)
        out.append(Message(message_id, n in hanging, delivery))
    return out


@dataclass(slots=True)
class Offered:
    """What the load generator saw: when each message was answered 204 (epoch seconds)."""

    acked: dict[str, float] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    max_send_lag_s: float = 0.0
    seconds: float = 0.0


async def offer(url: str, messages: list[Message], rate: float, concurrency: int = 32) -> Offered:
    """Open loop: message ``i`` is sent at ``start + i / rate``, whatever the server does."""
    result = Offered()
    due = iter(enumerate(messages))
    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter() + 0.05

        async def worker() -> None:
            for i, message in due:
                scheduled = start + i / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                result.max_send_lag_s = max(result.max_send_lag_s, time.perf_counter() - scheduled)
                d = message.delivery
                try:
                    async with session.post(url, data=d.body, headers=d.headers) as response:
                        await response.read()
                        status = str(response.status)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    status = type(exc).__name__
                result.statuses[status] += 1
                if status == "204":
                    result.acked[message.message_id] = time.time()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - start
    return result


@dataclass
class AgentBench(Bench):
    """:class:`bench.processors.Bench` (worker, mail server) with ingest in front and the
    worker's settings overridden by ``extra``."""

    extra: dict[str, str] = field(default_factory=dict)
    #: more of ingest's environment (OTEL_* for bench.tracing)
    ingest_extra: dict[str, str] = field(default_factory=dict)
    secret: str = field(default_factory=webhook_secret)
    ingest_port: int = 0
    ingest: ServerProcess | None = None

    def worker_env(self) -> dict[str, str]:
        env = super().worker_env()
        env.update(self.extra)
        return env

    def start_ingest(self) -> None:
        """``onceonly ingest`` as the ingest benchmark's (c) starts it, ``ingest_extra`` on
        top of its settings; returns once it is ready."""
        from bench.ingest import ingest_server
        from devstack.broker import free_port

        self.ingest_port = free_port()
        variant = Variant("c", env=self.ingest_extra)
        self.ingest = ingest_server(
            self.secret, self.bootstrap, self.topics, self.partitions, self.work,
            self.ingest_port, variant=variant,
        )  # fmt: skip
        self.ingest.start()
        asyncio.run(self.ingest.wait_ready(f"{self.url_base}/readyz"))

    @property
    def url_base(self) -> str:
        return f"http://127.0.0.1:{self.ingest_port}"

    def wait_answered(self, ids: set[str], timeout_s: float, stall_s: float = 30.0) -> float:
        """Wait until every one of ``ids`` has a reply, at most ``timeout_s`` (or ``stall_s``
        without a new one); return the wall-clock time it ended."""
        deadline = time.monotonic() + timeout_s
        last, last_move = -1, time.monotonic()
        while True:
            got = len(ids & self.received().keys())
            if got >= len(ids) or time.monotonic() > deadline:
                return time.time()
            if got != last:
                last, last_move = got, time.monotonic()
            elif time.monotonic() - last_move > stall_s:
                return time.time()
            for process in (self.worker, self.ingest):
                if process is not None:
                    check_alive(process, "the benchmark waited for replies")
            time.sleep(0.25)

    def processes(self) -> list[ServerProcess]:
        return [*([self.ingest] if self.ingest else []), *super().processes()]


def warm_up(bench: AgentBench, tag: str) -> None:
    """A few messages answered before the measured load: the worker has joined its group."""
    warm = build_messages(bench.secret, 2 * bench.partitions, f"{tag}w", 0.0)
    pending, deadline = warm, time.monotonic() + 60
    while pending:  # a broker just started may refuse the first produces (ingest's 503)
        offered = asyncio.run(offer(bench.url_base + ROUTE, pending, rate=20.0))
        pending = [m for m in pending if m.message_id not in offered.acked]
        if pending and time.monotonic() > deadline:
            raise BenchError(f"warm-up: ingest answered {dict(offered.statuses)}")
        time.sleep(1.0 if pending else 0.0)
    bench.wait_answered({m.message_id for m in warm}, timeout_s=120, stall_s=120)
    missing = {m.message_id for m in warm} - bench.received().keys()
    if missing:
        raise BenchError(f"warm-up: {len(missing)} messages were never answered")


@dataclass(slots=True)
class Run:
    """One run: what was offered, what the mail server received, and the CPU meanwhile."""

    label: str
    rate: float
    partitions: int
    messages: list[Message]
    offered: Offered
    received: dict[str, float]
    cpu: dict[str, float]  #: % of one core of each process over the window
    seconds: float  #: the measured window: the load and its tail
    metrics: dict[str, float]  #: the worker's counters at the end

    @property
    def normal(self) -> list[Message]:
        return [m for m in self.messages if not m.hang]

    @property
    def hanging(self) -> int:
        return len(self.messages) - len(self.normal)

    @property
    def latencies(self) -> list[float]:
        """Seconds from the 204 to the reply, of the answered messages that do not hang."""
        acked, got = self.offered.acked, self.received
        return [
            got[m.message_id] - acked[m.message_id]
            for m in self.normal
            if m.message_id in acked and m.message_id in got
        ]

    @property
    def answered(self) -> int:
        return sum(1 for m in self.messages if m.message_id in self.received)

    @property
    def unanswered(self) -> int:
        """Messages that do not hang, acknowledged 204, and never answered."""
        acked, got = self.offered.acked, self.received
        return sum(1 for m in self.normal if m.message_id in acked and m.message_id not in got)

    @property
    def hang_answered(self) -> int:
        return sum(1 for m in self.messages if m.hang and m.message_id in self.received)

    @property
    def replies_per_s(self) -> float:
        """Replies the mail server received, first to last (measured messages only)."""
        got = self.received
        return per_second(got[m.message_id] for m in self.messages if m.message_id in got)

    def cpu_ms_per_reply(self, *names: str) -> float:
        """ms of CPU per reply of the processes ``names`` (the worker's if none)."""
        percent = sum(self.cpu.get(n, 0.0) for n in names or ("worker",))
        return 10 * percent * self.seconds / self.answered if self.answered else math.nan

    def p(self, q: float) -> float:
        return percentile(self.latencies, q)


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
            warm_up(bench, tag)
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
        kept = counters(scrape(bench.worker_port) or {}, *COUNTERS)
    result = Run(
        setup.label,
        setup.rate,
        setup.partitions,
        messages,
        offered,
        received,
        cpu.percent,
        seconds,
        kept,
    )
    console.print(
        f"({setup.label}) {result.replies_per_s:.2f} replies/s, p50 {result.p(0.5):.2f} s, "
        f"p99 {result.p(0.99):.2f} s, {result.unanswered} unanswered"
    )
    return result

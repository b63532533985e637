"""Chaos run: many messages through real processes while things break; every one answered once.

::

    make chaos      # 10,000 messages, 500 threads, 5 inboxes, 2 workers, 5 kills, 1 broker restart
    make chaos-ci   # the CI size: 500 messages, 50 threads, 1 kill, 1 broker restart
    python -m chaos.run --help

**Set-up**, every part a real process, in a fresh run directory (a temporary one unless
``--run-dir``): a Kafka broker (``onceonly broker``, the embedded single-node KRaft broker,
on free ports), the topics (``onceonly topics``), the fake AgentMail server
(``python -m testkit.fakes.agentmail_server``) seeded over its control API with every message
of every inbox, ``onceonly ingest`` (a ``whsec_`` secret; ``ONCEONLY_PRODUCE_TIMEOUT_MS``
3000, so a broker outage answers 503 within 3 s) and ``--workers`` ``onceonly worker``
processes, each with its own data directory, web port and ``ONCEONLY_WORKER_ID``.

**Load**: ``--messages`` distinct AgentMail ``message.received`` events over ``--threads``
threads and ``--inboxes`` inboxes, POSTed to ingest as Svix would: signed at send time with
the ``svix`` package's own ``Webhook.sign`` (``testkit.signing.svix_headers``), and every
answer other than 2xx retried with backoff until ingest answers 204. New messages start at
``--rate`` per second, in a random interleaving of the threads; a thread's deliveries go
one after the other (each waits for the 204 of the one before), so the order in which they
reach Kafka is the planned one. ``--out-of-order`` (20 %) of the messages arrive after a
later message of their own thread (a message moved 1 to 3 places back; the count is exact).
``--duplicates`` (30 %) of the messages are delivered twice: half of them as two concurrent
POSTs, half re-sent ``--late-duplicate-delay-s`` to 1.5 times that later ("minutes later":
120 s at full size), with the same Svix id and body.

**Faults during the run**: ``--kills`` SIGKILLs of a random live worker at random moments of
the load (each restarted at once with the same data directory and worker id);
``--broker-restarts`` clean restarts of the broker (SIGTERM, ``--broker-down-s`` down, then
started again on the same port and data); the fake AgentMail server, every second, answers a
``--fail-rate`` share of the reply calls with a 5xx without sending, and a ``--lose-rate``
share with a 500 *after* sending (a lost response), with a random latency of up to
``--latency-ms`` on every call, and ``--latency-spikes`` one-second spikes longer than the
workers' send timeout (``--send-timeout-s``), so sends time out while the server still
sends. A worker that exits on its own is restarted, like a supervisor would, and counted.

**Then**: wait until the workers are idle (consumer lag 0 and the outbox unchanged for a
while), ``onceonly replay --from-offset 0`` (the whole deliveries topic), wait again,
``onceonly catch-up --inbox <inbox> --since <run start>`` for every inbox, wait again.

**Verdict**: the fake's outbox, counted per (inbox, replied-to message id). The run prints
the counts (messages, deliveries, emails, distinct answered, missing, doubled, kills, broker
restarts, duration, ...) and exits 0 only if there are exactly ``--messages`` emails, one per
message, none to anything else, and every delivery was accepted. Exit 1: the verdict failed;
exit 2: the run itself could not be carried out. The run directory (every process's log,
``events.log`` with the timeline of faults, ``summary.txt``, ``findings.txt`` for each
missing or doubled email with the log lines that name it) is kept whenever the run does not
pass, and its path printed; ``--keep`` keeps it anyway. ``--record`` also writes the summary
to ``chaos/results/<date>-<size>.md``.

**Why one email per message is the right count**: the workers run with
``ONCEONLY_REORDER_WINDOW_MS=0`` (``--window-ms``), so nothing is held and no burst forms;
every message gets its own reply. With a window, a burst of one thread's messages gets one
reply, to the latest, and the others are recorded *covered* by it; ``--window-ms N`` runs
that way and then counts a message answered if it has its own email *or* the ledger records
it covered by a message that has one, and wants emails == messages - covered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import click

from devstack.broker import free_port
from foundation.settings import DEFAULT_TOPICS
from testkit import payloads, signing
from testkit.processes import Supervised

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "chaos" / "results"
APP_ID = "onceonly-chaos"
PARTITIONS = 8
DELIVERIES_TOPIC = DEFAULT_TOPICS["deliveries"]
LEDGER_TOPIC = DEFAULT_TOPICS["ledger"]
DEAD_LETTER_TOPIC = DEFAULT_TOPICS["dead_letters"]
PRODUCE_TIMEOUT_MS = 3000
SEND_ATTEMPTS = 12


CATCH_UP_LINE = re.compile(
    r"found (\d+), answered (\d+), skipped (\d+) \((\d+) sent by the agent, (\d+) already "
    r"answered\), pending (\d+)"
)


class ChaosError(Exception):
    """The run could not be carried out (not a verdict): exit 2."""


def _now() -> float:
    return time.monotonic()


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class Message:
    n: int
    thread: int
    k: int  #: its place in the thread, in payload time
    inbox_id: str
    thread_id: str
    message_id: str
    event_id: str
    timestamp: str
    sender: str
    text: str

    @property
    def svix_id(self) -> str:
        return f"msg_chaos_{self.n:06d}"

    @property
    def body(self) -> bytes:
        return payloads.dumps(
            payloads.agentmail_received(
                event_id=self.event_id,
                inbox_id=self.inbox_id,
                thread_id=self.thread_id,
                message_id=self.message_id,
                timestamp=self.timestamp,
                sender=self.sender,
                text=self.text,
            )
        )

    def seed(self) -> dict[str, Any]:
        """The same message as the fake AgentMail server holds it (for replies, catch-up)."""
        return {
            "inbox_id": self.inbox_id,
            "message_id": self.message_id,
            "thread_id": self.thread_id,
            "from": self.sender,
            "to": [self.inbox_id],
            "subject": "Meeting",
            "text": self.text,
            "timestamp": self.timestamp,
            "labels": ["received"],
        }


@dataclass(frozen=True, slots=True)
class Arrival:
    message: Message
    due_s: float  #: seconds after the load starts
    copies: int = 1  #: 2: a concurrent duplicate
    late: bool = False  #: a duplicate re-sent later, outside the thread's order


@dataclass
class Plan:
    messages: list[Message]
    arrivals: list[Arrival]  #: first deliveries (and concurrent copies), in start order
    late: list[Arrival]  #: late duplicates, by due time
    out_of_order: set[int]  #: message numbers that arrive after a later one of their thread
    concurrent: set[int]
    late_dups: set[int]
    since: datetime  #: every message's payload time is at or after this

    @property
    def deliveries(self) -> int:
        return sum(a.copies for a in self.arrivals) + len(self.late)

    @property
    def load_s(self) -> float:
        last = [a.due_s for a in self.arrivals] + [a.due_s for a in self.late]
        return max(last, default=0.0)


def build_plan(
    *,
    messages: int,
    threads: int,
    inboxes: int,
    duplicates: float,
    out_of_order: float,
    rate: float,
    late_delay_s: float,
    rng: random.Random,
    base: datetime,
) -> Plan:
    threads = max(1, min(threads, messages))
    inboxes = max(1, min(inboxes, threads))
    sizes = [messages // threads + (1 if t < messages % threads else 0) for t in range(threads)]
    by_thread: list[list[Message]] = []
    flat: list[Message] = []
    for t, size in enumerate(sizes):
        row = []
        for k in range(size):
            at = base + timedelta(seconds=k, milliseconds=t % 1000)
            message = Message(
                n=len(flat),
                thread=t,
                k=k,
                inbox_id=f"chaos-{t % inboxes}@agentmail.to",
                thread_id=f"thr-chaos-{t:04d}",
                message_id=f"<chaos-t{t:04d}-m{k:03d}@example.com>",
                event_id=f"evt_chaos_{len(flat):06d}",
                timestamp=_iso(at),
                sender=f"customer-{t:04d}@example.com",
                text=f"Message {k + 1} of thread {t}: can we meet on day {k + 1}?",
            )
            row.append(message)
            flat.append(message)
        by_thread.append(row)

    # Out of order: non-overlapping blocks k..k+j of one thread arrive as k+1..k+j, k, so
    # exactly message k of each block arrives after a later message of its thread.
    wanted = round(out_of_order * messages)
    candidates = [
        (t, k, j)
        for t, size in enumerate(sizes)
        for k in range(size)
        for j in (1, 2, 3)
        if k + j < size
    ]
    rng.shuffle(candidates)
    taken: set[tuple[int, int]] = set()
    orders = [list(range(size)) for size in sizes]
    moved = 0
    for t, k, j in candidates:
        if moved >= wanted:
            break
        cells = {(t, p) for p in range(k, k + j + 1)}
        if cells & taken:
            continue
        taken |= cells
        orders[t][k : k + j + 1] = [*range(k + 1, k + j + 1), k]
        moved += 1
    late_arrivals: set[int] = set()
    for t, order in enumerate(orders):
        highest = -1
        for k in order:
            if k < highest:
                late_arrivals.add(by_thread[t][k].n)
            highest = max(highest, k)

    dup_count = round(duplicates * messages)
    chosen = rng.sample(range(messages), dup_count)
    concurrent = set(chosen[: dup_count // 2])
    late_dups = set(chosen[dup_count // 2 :])

    # A random interleaving of the threads that keeps each thread's arrival order.
    tokens = [t for t, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(tokens)
    cursor = [0] * threads
    arrivals: list[Arrival] = []
    due_of: dict[int, float] = {}
    for i, t in enumerate(tokens):
        message = by_thread[t][orders[t][cursor[t]]]
        cursor[t] += 1
        due = i / rate
        due_of[message.n] = due
        arrivals.append(Arrival(message, due, copies=2 if message.n in concurrent else 1))
    late = sorted(
        (
            Arrival(flat[n], due_of[n] + late_delay_s * rng.uniform(1.0, 1.5), late=True)
            for n in late_dups
        ),
        key=lambda a: a.due_s,
    )
    return Plan(
        messages=flat,
        arrivals=arrivals,
        late=late,
        out_of_order=late_arrivals,
        concurrent=concurrent,
        late_dups=late_dups,
        since=base - timedelta(seconds=1),
    )


# --------------------------------------------------------------------------- processes


class Proc(Supervised):
    """One real process in its own session, output appended to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, argv, env, log_path, append=True)

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return self.process.pid if self.process is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class BrokerProc(Proc):
    """``onceonly broker`` (the embedded KRaft broker) as a process; its JVM leads its own
    session, so a stop goes through the command, which stops the JVM cleanly."""

    def __init__(self, run_dir: Path, port: int, env: dict[str, str], log_path: Path) -> None:
        super().__init__("broker", [sys.executable, "-m", "onceonly", "broker"], env, log_path)
        self.run_dir = run_dir
        self.port = port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_and_wait(self, timeout_s: float = 120.0) -> None:
        before = self.log_text().count("kafka broker ready at")
        self.start()
        deadline = _now() + timeout_s
        while self.log_text().count("kafka broker ready at") <= before:
            if not self.alive:
                raise ChaosError(f"the broker exited during start-up:\n{self.log_tail()}")
            if _now() > deadline:
                raise ChaosError(f"the broker was not ready within {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 60.0) -> None:
        super().stop(timeout_s)
        self._kill_leftover_jvm()

    def kill(self) -> None:
        super().kill()
        self._kill_leftover_jvm()

    def _kill_leftover_jvm(self) -> None:
        """If the command was killed before it stopped its JVM, stop the JVM by its pid."""
        pid_path = self.run_dir / "broker" / "broker.pid"
        try:
            pid = int(pid_path.read_text(encoding="ascii").strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"kafka.Kafka" in cmdline and str(self.run_dir).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Options:
    messages: int
    threads: int
    inboxes: int
    workers: int
    kills: int
    broker_restarts: int
    duplicates: float
    out_of_order: float
    rate: float
    late_duplicate_delay_s: float
    window_ms: int
    fail_rate: float
    lose_rate: float
    latency_ms: float
    latency_spikes: int
    send_timeout_s: float
    broker_down_s: float
    concurrency: int
    delivery_timeout_s: float
    drain_timeout_s: float
    seed: int
    run_dir: Path | None
    keep: bool
    record: bool

    @property
    def size(self) -> str:
        return "full" if self.messages >= 10_000 else f"{self.messages}-messages"

    def command(self) -> str:
        return (
            f"python -m chaos.run --messages {self.messages} --threads {self.threads} "
            f"--inboxes {self.inboxes} --workers {self.workers} --kills {self.kills} "
            f"--broker-restarts {self.broker_restarts} --rate {self.rate:g} "
            f"--late-duplicate-delay-s {self.late_duplicate_delay_s:g} "
            f"--window-ms {self.window_ms} --seed {self.seed}"
        )


# --------------------------------------------------------------------------- the load


@dataclass
class LoadStats:
    attempts: int = 0
    accepted: int = 0  #: deliveries (copies included) that got a 2xx
    retried: int = 0  #: deliveries that needed more than one attempt
    statuses: Counter[str] = field(default_factory=Counter)
    never_accepted: list[str] = field(default_factory=list)
    done: int = 0  #: deliveries finished (accepted or given up)


class Load:
    """Svix-like sender: signs at send time, retries anything but 2xx until a 204."""

    def __init__(self, url: str, plan: Plan, opts: Options, rng: random.Random) -> None:
        self.url = url
        self.plan = plan
        self.opts = opts
        self.rng = rng
        self.stats = LoadStats()
        self._slots = asyncio.Semaphore(opts.concurrency)

    async def run(self, t0: float) -> None:
        connector = aiohttp.TCPConnector(limit=self.opts.concurrency + 8)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            previous: dict[int, asyncio.Event] = {}
            tasks = []
            for arrival in self.plan.arrivals:
                thread = arrival.message.thread
                done = asyncio.Event()
                tasks.append(
                    asyncio.create_task(
                        self._arrival(session, arrival, previous.get(thread), done, t0)
                    )
                )
                previous[thread] = done
            for arrival in self.plan.late:
                tasks.append(asyncio.create_task(self._arrival(session, arrival, None, None, t0)))
            await asyncio.gather(*tasks)

    async def _arrival(
        self,
        session: aiohttp.ClientSession,
        arrival: Arrival,
        before: asyncio.Event | None,
        done: asyncio.Event | None,
        t0: float,
    ) -> None:
        try:
            await asyncio.sleep(max(0.0, t0 + arrival.due_s - _now()))
            if before is not None:
                await before.wait()  # the thread's previous delivery has its 204
            body = arrival.message.body
            await asyncio.gather(
                *(self._post(session, arrival.message, body) for _ in range(arrival.copies))
            )
        finally:
            if done is not None:
                done.set()

    async def _post(self, session: aiohttp.ClientSession, message: Message, body: bytes) -> None:
        deadline = _now() + self.opts.delivery_timeout_s
        attempt = 0
        while True:
            attempt += 1
            headers = signing.svix_headers(body, msg_id=message.svix_id)  # signed now
            status = "error"
            async with self._slots:
                self.stats.attempts += 1
                try:
                    async with session.post(self.url, data=body, headers=headers) as response:
                        await response.read()
                        status = str(response.status)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    status = type(exc).__name__
            self.stats.statuses[status] += 1
            if status.startswith("2"):
                self.stats.accepted += 1
                self.stats.done += 1
                if attempt > 1:
                    self.stats.retried += 1
                return
            if _now() > deadline:
                self.stats.never_accepted.append(message.event_id)
                self.stats.done += 1
                return
            await asyncio.sleep(min(5.0, 0.25 * 2 ** min(attempt, 6)) * self.rng.uniform(0.5, 1.0))


# --------------------------------------------------------------------------- the run


@dataclass
class Snapshot:
    phase: str
    at_s: float
    emails: int
    quiet: bool


class Chaos:
    def __init__(self, opts: Options, run_dir: Path) -> None:
        self.opts = opts
        self.run_dir = run_dir
        self.rng = random.Random(opts.seed)
        self.started_wall = datetime.now(UTC)
        self.t_start = _now()
        self.events_log = run_dir / "events.log"
        self.broker_port = free_port()
        self.ingest_port = free_port()
        self.mail_port = free_port()
        self.mail_url = f"http://127.0.0.1:{self.mail_port}"
        self.broker = BrokerProc(
            run_dir, self.broker_port, self._broker_env(), run_dir / "broker.log"
        )
        self.mail: Proc | None = None
        self.ingest: Proc | None = None
        self.workers: list[Proc] = []
        self.plan: Plan | None = None
        self.load: Load | None = None
        self.kills: list[str] = []
        self.crashes: list[str] = []
        self.broker_restarts: list[str] = []
        self.broker_busy = False
        self.injected = Counter[str]()
        self.snapshots: list[Snapshot] = []
        self.phases: list[tuple[str, float]] = []
        self.replayed: str = ""
        self.catch_ups: list[list[int]] = []  #: per inbox: found ... pending
        self._stop = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    # ---------------------------------------------------------------- helpers

    def elapsed(self) -> float:
        return _now() - self.t_start

    def event(self, text: str, *, echo: bool = True) -> None:
        line = f"[{self.elapsed():7.1f}s] {text}"
        with self.events_log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        if echo:
            click.echo(line)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def _clean_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("ONCEONLY_") and k != "AGENTMAIL_API_KEY"
        }
        env.update({"PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"})
        return env

    def _broker_env(self) -> dict[str, str]:
        env = self._clean_env()
        env.update(
            {
                "ONCEONLY_RUN_DIR": str(self.run_dir),
                "ONCEONLY_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.broker_port}",
                "ONCEONLY_BROKER_HEAP_MB": "512",
            }
        )
        return env

    def env(self, **extra: str) -> dict[str, str]:
        env = self._clean_env()
        env.update(
            {
                "ONCEONLY_KAFKA_BOOTSTRAP": self.bootstrap,
                "ONCEONLY_PARTITIONS": str(PARTITIONS),
                "ONCEONLY_APP_ID": APP_ID,
                "ONCEONLY_DELIVERIES_TOPIC": DELIVERIES_TOPIC,
                "ONCEONLY_LEDGER_TOPIC": LEDGER_TOPIC,
                "ONCEONLY_DEAD_LETTER_TOPIC": DEAD_LETTER_TOPIC,
                "ONCEONLY_RUN_DIR": str(self.run_dir / "cli"),
                "ONCEONLY_REORDER_WINDOW_MS": str(self.opts.window_ms),
                "ONCEONLY_AGENTMAIL_BASE_URL": self.mail_url,
                "AGENTMAIL_API_KEY": "chaos-api-key",
                "ONCEONLY_LOG_LEVEL": "INFO",
            }
        )
        env.update(extra)
        return env

    async def _mail(self, method: str, path: str, body: Any = None) -> Any:
        assert self._session is not None
        async with self._session.request(
            method, self.mail_url + path, json=body, timeout=aiohttp.ClientTimeout(total=120)
        ) as response:
            if response.status != 200:
                raise ChaosError(f"{method} {path} answered {response.status}")
            return await response.json()

    async def _cli(self, name: str, *args: str, timeout_s: float = 600.0) -> tuple[int, str]:
        """``onceonly <args>`` as a process; its output goes to ``<name>.log`` and is returned."""
        log_path = self.run_dir / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"\n===== chaos: onceonly {' '.join(args)} =====\n".encode())
            log.flush()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "onceonly",
                *args,
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                code = -9
        text = log_path.read_text(encoding="utf-8", errors="replace")
        return code, text.rsplit("===== chaos:", 1)[-1]

    async def _lag(self, *, trace: bool = False) -> int | None:
        """The worker group's total lag, or None when it cannot be read whole (the broker
        is down, or the answer does not cover every partition)."""
        from foundation.kafka import BrokerUnavailable, consumer_lag

        if self.broker_busy:
            return None
        try:
            rows = await asyncio.to_thread(
                consumer_lag, self.bootstrap, APP_ID, DELIVERIES_TOPIC, timeout_s=5.0
            )
        except BrokerUnavailable as exc:
            if trace:
                self.event(f"lag: not readable: {exc}", echo=False)
            return None
        if trace:
            detail = " ".join(f"{r.partition}:{r.committed}/{r.end}" for r in rows)
            self.event(f"lag {sum(r.lag for r in rows)} (committed/end {detail})", echo=False)
        if len(rows) != PARTITIONS or any(r.end < 0 or r.lag < 0 for r in rows):
            return None
        return sum(r.lag for r in rows)

    async def _stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = await self._mail("GET", "/_control/stats")
        return stats

    # ---------------------------------------------------------------- set-up

    async def setup(self) -> None:
        classpath = ROOT / ".run" / "kafka.classpath"
        if classpath.is_file():  # saves a Maven run: the jars are in the Maven cache
            shutil.copy2(classpath, self.run_dir / "kafka.classpath")
        self.event(f"run directory {self.run_dir}")
        self.event(f"starting the broker on {self.bootstrap}")
        await asyncio.to_thread(self.broker.start_and_wait)
        code, out = await self._cli("topics", "topics", timeout_s=120)
        if code != 0:
            raise ChaosError(f"onceonly topics failed (exit {code}):\n{out}")

        self.mail = Proc(
            "agentmail",
            [sys.executable, "-m", "testkit.fakes.agentmail_server", "--port", str(self.mail_port)],
            self._clean_env(),
            self.run_dir / "agentmail.log",
        ).start()
        await self._wait_http(self.mail, self.mail_url + "/_control/health")

        assert self.plan is not None
        seeds = [m.seed() for m in self.plan.messages]
        for i in range(0, len(seeds), 1000):
            await self._mail("POST", "/_control/seed", {"messages": seeds[i : i + 1000]})
        self.event(f"fake AgentMail at {self.mail_url}, seeded with {len(seeds)} messages")

        self.ingest = Proc(
            "ingest",
            [sys.executable, "-m", "onceonly", "ingest"],
            self.env(
                ONCEONLY_INGEST_PORT=str(self.ingest_port),
                ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=signing.SVIX_SECRET,
                ONCEONLY_PRODUCE_TIMEOUT_MS=str(PRODUCE_TIMEOUT_MS),
            ),
            self.run_dir / "ingest.log",
        ).start()
        await self._wait_http(self.ingest, f"http://127.0.0.1:{self.ingest_port}/readyz")
        self.event(f"ingest at http://127.0.0.1:{self.ingest_port}/webhooks/agentmail")

        for i in range(1, self.opts.workers + 1):
            data = self.run_dir / "workers" / f"w{i}"
            data.mkdir(parents=True, exist_ok=True)
            worker = Proc(
                f"w{i}",
                [sys.executable, "-m", "onceonly", "worker"],
                self.env(
                    ONCEONLY_DATA_DIR=str(data),
                    ONCEONLY_RUN_DIR=str(data / "run"),
                    ONCEONLY_WORKER_PORT=str(free_port()),
                    ONCEONLY_WORKER_ID=f"chaos-w{i}",
                    ONCEONLY_SEND_ATTEMPTS=str(SEND_ATTEMPTS),
                    ONCEONLY_SEND_TIMEOUT_S=f"{self.opts.send_timeout_s:g}",
                ),
                self.run_dir / f"worker-w{i}.log",
            )
            self.workers.append(worker.start())
        await self._wait_workers_ready()
        self.event(
            f"{len(self.workers)} workers ready "
            f"(window {self.opts.window_ms} ms, send timeout {self.opts.send_timeout_s:g} s, "
            f"{SEND_ATTEMPTS} send attempts)"
        )

    async def _wait_http(self, proc: Proc, url: str, timeout_s: float = 60.0) -> None:
        assert self._session is not None
        deadline = _now() + timeout_s
        while True:
            if not proc.alive:
                raise ChaosError(f"{proc.name} exited during start-up:\n{proc.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            if _now() > deadline:
                raise ChaosError(f"{proc.name} did not answer {url} within {timeout_s:g} s")
            await asyncio.sleep(0.2)

    async def _wait_workers_ready(self, timeout_s: float = 120.0) -> None:
        deadline = _now() + timeout_s
        while True:
            ready = [w for w in self.workers if "Ready" in w.log_text()]
            for w in self.workers:
                if not w.alive:
                    raise ChaosError(f"worker {w.name} exited during start-up:\n{w.log_tail()}")
            if len(ready) == len(self.workers):
                return
            if _now() > deadline:
                raise ChaosError(f"workers not ready within {timeout_s:g} s")
            await asyncio.sleep(0.5)

    # ---------------------------------------------------------------- background work

    async def supervise(self) -> None:
        """A supervisor: restart a worker that exited on its own; stop on a fatal death."""
        while not self._stop.is_set():
            for worker in self.workers:
                if worker.process is not None and not worker.alive:
                    code = worker.returncode
                    self.crashes.append(f"{worker.name} exit {code} at {self.elapsed():.0f}s")
                    self.event(
                        f"worker {worker.name} (pid {worker.pid}) exited on its own "
                        f"(exit {code}); restarting it. Its last lines:\n"
                        + _indent(worker.log_tail(8))
                    )
                    worker.start()
            for proc in (self.mail, self.ingest):
                if proc is not None and not proc.alive:
                    raise ChaosError(
                        f"{proc.name} died (exit {proc.returncode}):\n" + proc.log_tail()
                    )
            if not self.broker_busy and not self.broker.alive:
                raise ChaosError(f"the broker died on its own:\n{self.broker.log_tail()}")
            await asyncio.sleep(0.5)

    async def inject_faults(self, spikes: list[float], t0: float) -> None:
        """Every second: random latency, and 5xx / lost responses for a share of the reply
        calls of the last second; a spike holds every call longer than the send timeout."""
        last_replies = 0
        last_fail = last_lose = 0
        pending_spikes = sorted(spikes)
        spike_s = self.opts.send_timeout_s + 1.0
        while not self._stop.is_set():
            stats = await self._stats()
            faults = stats["faults"]
            self.injected["5xx"] += max(0, last_fail - int(faults["fail_remaining"]))
            self.injected["lost"] += max(0, last_lose - int(faults["lose_remaining"]))
            replies = int(stats["requests"].get("reply", 0))
            calls = max(0, replies - last_replies)
            last_replies = replies
            last_fail = sum(self.rng.random() < self.opts.fail_rate for _ in range(calls))
            last_lose = sum(self.rng.random() < self.opts.lose_rate for _ in range(calls))
            latency = self.rng.uniform(0.0, self.opts.latency_ms / 1000)
            if pending_spikes and _now() >= t0 + pending_spikes[0]:
                pending_spikes.pop(0)
                latency = spike_s
                self.injected["spikes"] += 1
                self.event(f"latency spike: {spike_s:g} s on every AgentMail call for 1 s")
            await self._mail(
                "POST",
                "/_control/faults",
                {
                    "latency_s": latency,
                    "fail_next": last_fail,
                    "fail_status": self.rng.choice([500, 502, 503]),
                    "lose_response_next": last_lose,
                },
            )
            await asyncio.sleep(1.0)
        await self._mail(
            "POST", "/_control/faults", {"latency_s": 0, "fail_next": 0, "lose_response_next": 0}
        )

    async def kill_workers(self, times: list[float], t0: float) -> None:
        for at in sorted(times):
            await asyncio.sleep(max(0.0, t0 + at - _now()))
            alive = [w for w in self.workers if w.alive]
            if not alive:
                continue
            worker = self.rng.choice(alive)
            pid = worker.pid
            worker.kill()
            self.kills.append(f"{worker.name} at {self.elapsed():.0f}s")
            worker.start()
            self.event(
                f"SIGKILL worker {worker.name} (pid {pid}); restarted as pid {worker.pid} "
                f"with the same data dir and worker id"
            )

    async def restart_broker(self, times: list[float], t0: float) -> None:
        for at in sorted(times):
            await asyncio.sleep(max(0.0, t0 + at - _now()))
            self.broker_busy = True
            try:
                self.event("broker: stopping (SIGTERM)")
                started = _now()
                await asyncio.to_thread(self.broker.stop)
                self.event(f"broker: stopped in {_now() - started:.1f} s")
                await asyncio.sleep(self.opts.broker_down_s)
                await asyncio.to_thread(self.broker.start_and_wait)
                down = _now() - started
                self.broker_restarts.append(f"at {self.elapsed() - down:.0f}s, down {down:.0f}s")
                self.event(f"broker: back on {self.bootstrap} after {down:.1f} s")
            finally:
                self.broker_busy = False

    async def report_progress(self, every_s: float = 15.0) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(every_s)
            await self.status_line()

    async def status_line(self) -> None:
        stats = await self._stats()
        lag = await self._lag()
        load = self.load.stats if self.load is not None and self.plan is not None else None
        planned = self.plan.deliveries if self.plan is not None else 0
        sent = f"deliveries {load.done}/{planned}, {load.attempts} POSTs" if load else ""
        alive = sum(w.alive for w in self.workers)
        self.event(
            f"status: {sent}, emails {stats['sent']}, reply calls "
            f"{stats['requests'].get('reply', 0)}, lag {'?' if lag is None else lag}, "
            f"workers up {alive}/{len(self.workers)}"
        )

    # ---------------------------------------------------------------- phases

    async def wait_quiet(self, phase: str) -> Snapshot:
        """Until the consumer lag has been 0, and the outbox and the reply calls unchanged,
        for a while (10 s, or three reorder windows)."""
        stable_s = max(10.0, 3 * self.opts.window_ms / 1000)
        deadline = _now() + self.opts.drain_timeout_s
        last: tuple[int, int] | None = None
        since = _now()
        quiet = False
        while True:
            stats = await self._stats()
            now_counts = (int(stats["sent"]), int(stats["requests"].get("reply", 0)))
            lag = await self._lag(trace=True)
            if now_counts != last or lag != 0 or self.broker_busy:
                last, since = now_counts, _now()
            if _now() - since >= stable_s:
                quiet = True
                break
            if _now() > deadline:
                self.event(
                    f"{phase}: NOT quiet within {self.opts.drain_timeout_s:g} s "
                    f"(lag {lag}, emails {now_counts[0]})"
                )
                break
            await asyncio.sleep(2.0)
        snapshot = Snapshot(phase, self.elapsed(), last[0] if last else 0, quiet)
        self.snapshots.append(snapshot)
        self.event(f"{phase}: quiet={quiet}, emails {snapshot.emails}")
        return snapshot

    async def run(self) -> Verdict:
        opts = self.opts
        self._session = aiohttp.ClientSession()
        try:
            base = datetime.now(UTC).replace(microsecond=0)
            self.plan = build_plan(
                messages=opts.messages,
                threads=opts.threads,
                inboxes=opts.inboxes,
                duplicates=opts.duplicates,
                out_of_order=opts.out_of_order,
                rate=opts.rate,
                late_delay_s=opts.late_duplicate_delay_s,
                rng=self.rng,
                base=base,
            )
            plan = self.plan
            self.event(
                f"plan: {len(plan.messages)} messages, {plan.deliveries} deliveries "
                f"({len(plan.concurrent)} concurrent and {len(plan.late_dups)} late duplicates), "
                f"{len(plan.out_of_order)} out of order, load over {plan.load_s:.0f} s, seed "
                f"{opts.seed}"
            )
            phase_t = _now()
            await self.setup()
            self.phases.append(("set-up", _now() - phase_t))

            # the load, with the faults at random moments of it
            window = plan.load_s
            kill_times = [self.rng.uniform(0.05, 0.95) * window for _ in range(opts.kills)]
            broker_times = [
                self.rng.uniform(0.25, 0.75) * window for _ in range(opts.broker_restarts)
            ]
            spike_times = [
                self.rng.uniform(0.05, 0.95) * window for _ in range(opts.latency_spikes)
            ]
            self.event(
                "faults planned at (s into the load): kills "
                + ", ".join(f"{t:.0f}" for t in sorted(kill_times))
                + "; broker restarts "
                + ", ".join(f"{t:.0f}" for t in sorted(broker_times))
                + "; latency spikes "
                + ", ".join(f"{t:.0f}" for t in sorted(spike_times))
            )
            self.load = Load(
                f"http://127.0.0.1:{self.ingest_port}/webhooks/agentmail", plan, opts, self.rng
            )
            t0 = _now()
            phase_t = t0
            background = [
                asyncio.create_task(self.supervise()),
                asyncio.create_task(self.inject_faults(spike_times, t0)),
                asyncio.create_task(self.report_progress()),
            ]
            try:
                chaos = asyncio.gather(
                    self.load.run(t0),
                    self.kill_workers(kill_times, t0),
                    self.restart_broker(broker_times, t0),
                )
                await _first_of(chaos, background)
                self.event(
                    f"load done: {self.load.stats.accepted} deliveries accepted, "
                    f"{self.load.stats.attempts} POSTs, {dict(self.load.stats.statuses)}"
                )
                self.phases.append(("load and faults", _now() - phase_t))

                phase_t = _now()
                await _first_of(self.wait_quiet("after the load"), background)
                self.phases.append(("drain", _now() - phase_t))

                phase_t = _now()
                code, out = await self._cli("replay", "replay", "--from-offset", "0")
                found = re.search(r"replayed (\d+) records", out)
                self.replayed = found.group(1) if found else f"exit {code}"
                self.event(f"onceonly replay --from-offset 0: exit {code}, {self.replayed} records")
                if code != 0:
                    raise ChaosError(f"onceonly replay failed (exit {code}):\n{out[-3000:]}")
                await _first_of(self.wait_quiet("after the replay"), background)
                self.phases.append(("replay", _now() - phase_t))

                phase_t = _now()
                since = plan.since.strftime("%Y-%m-%dT%H:%M:%S%z")
                for inbox in sorted({m.inbox_id for m in plan.messages}):
                    code, out = await self._cli(
                        "catch-up",
                        "catch-up",
                        "--inbox",
                        inbox,
                        "--since",
                        since,
                        "--wait-s",
                        "120",
                    )
                    found = CATCH_UP_LINE.search(out)
                    line = found.group(0).strip() if found else f"exit {code}"
                    if found:
                        self.catch_ups.append([int(g) for g in found.groups()])
                    self.event(f"onceonly catch-up --inbox {inbox} --since {since}: {line}")
                    if code != 0:
                        raise ChaosError(f"onceonly catch-up failed (exit {code}):\n{out[-3000:]}")
                await _first_of(self.wait_quiet("after the catch-up"), background)
                self.phases.append(("catch-up", _now() - phase_t))
            finally:
                self._stop.set()
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await self._mail(
                        "POST",
                        "/_control/faults",
                        {"latency_s": 0, "fail_next": 0, "lose_response_next": 0},
                    )
            return await self.verdict()
        finally:
            await self._session.close()

    # ---------------------------------------------------------------- the verdict

    async def verdict(self) -> Verdict:
        from operations.catchup import read_ledger
        from operations.replay import ReplayError, dead_letters
        from processors.messages import reply_key

        assert self.plan is not None and self.load is not None
        outbox = (await self._mail("GET", "/_control/outbox"))["outbox"]
        stats = await self._stats()
        ledger = await asyncio.to_thread(read_ledger, self.bootstrap, LEDGER_TOPIC)
        try:
            letters = len(await asyncio.to_thread(dead_letters, self.bootstrap, DEAD_LETTER_TOPIC))
        except ReplayError:
            letters = -1
        per = Counter((e["inbox_id"], e["replied_to_message_id"]) for e in outbox)
        expected = {(m.inbox_id, m.message_id): m for m in self.plan.messages}
        by_key = {reply_key(i, mid): (i, mid) for i, mid in expected}
        covered: set[tuple[str, str]] = set()
        for pair in expected:
            record = ledger.get(reply_key(*pair))
            if per[pair] == 0 and record is not None and record.state.value == "covered":
                coverer = by_key.get(record.covered_by or "")
                if coverer is not None and per[coverer] == 1:
                    covered.add(pair)
        missing = sorted(p for p in expected if per[p] == 0 and p not in covered)
        doubled = {p: c for p, c in per.items() if p in expected and c > 1}
        unexpected = {p: c for p, c in per.items() if p not in expected}
        states = Counter(r.state.value for r in ledger.values())
        logs = Counter[str]()
        for worker in self.workers:
            text = worker.log_text()
            for label, needle in (
                ("reply sent", "reply sent"),
                ("duplicate deliveries skipped", "delivery skipped"),
                ("replies skipped (already handled)", "reply skipped: already handled"),
                ("send retries (same key)", "send retry with the same key"),
                ("replies dead-lettered", "reply dead-lettered"),
                ("worker exits on an unexpected failure", "unexpected failure; exiting"),
            ):
                logs[label] += text.count(needle)
        verdict = Verdict(
            opts=self.opts,
            messages=len(expected),
            deliveries=self.plan.deliveries,
            load=self.load.stats,
            out_of_order=len(self.plan.out_of_order),
            concurrent=len(self.plan.concurrent),
            late=len(self.plan.late_dups),
            emails=len(outbox),
            answered=sum(1 for p in expected if per[p] >= 1),
            covered=len(covered),
            missing=missing,
            doubled=doubled,
            unexpected=unexpected,
            kills=self.kills,
            crashes=self.crashes,
            broker_restarts=self.broker_restarts,
            injected=dict(self.injected),
            reply_calls=int(stats["requests"].get("reply", 0)),
            ledger_states=dict(states),
            dead_letters=letters,
            worker_logs=dict(logs),
            snapshots=self.snapshots,
            phases=self.phases,
            replayed=self.replayed,
            catch_ups=self.catch_ups,
            duration_s=self.elapsed(),
            started=self.started_wall,
            run_dir=self.run_dir,
        )
        verdict.findings = self.findings(verdict, ledger, reply_key)
        verdict.timeline = [
            line
            for line in self.events_log.read_text(encoding="utf-8").splitlines()
            if line.startswith("[") and "] lag" not in line and "] status:" not in line
        ]
        return verdict

    def findings(self, verdict: Verdict, ledger: dict[str, Any], key_of: Any) -> list[str]:
        """For each missing or doubled email: its ledger record and the log lines naming it."""
        out: list[str] = []
        suspects = [(p, "missing") for p in verdict.missing[:20]] + [
            (p, f"{c} emails") for p, c in list(verdict.doubled.items())[:20]
        ]
        logs = {w.name: w.log_text().splitlines() for w in self.workers}
        logs["ingest"] = self.ingest.log_text().splitlines() if self.ingest else []
        for (inbox, message_id), what in suspects:
            key = key_of(inbox, message_id)
            record = ledger.get(key)
            out.append(f"## {message_id} in {inbox}: {what}; reply key {key}")
            out.append(f"ledger: {record!r}")
            for name, lines in logs.items():
                hits = [ln for ln in lines if key in ln or message_id in ln]
                for line in hits[:15]:
                    out.append(f"{name}: {line}")
            out.append("")
        return out


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


async def _first_of(main: Awaitable[Any], background: Iterable[asyncio.Task[Any]]) -> Any:
    """Await ``main``; if a background task fails first (a fatal death), raise its error."""
    task = asyncio.ensure_future(main)
    watched = [task, *background]
    while True:
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        for finished in done:
            if finished is not task and finished.exception() is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise finished.exception()  # type: ignore[misc]
        if task in done:
            return task.result()
        watched = [t for t in watched if t not in done]


# --------------------------------------------------------------------------- report


@dataclass
class Verdict:
    opts: Options
    messages: int
    deliveries: int
    load: LoadStats
    out_of_order: int
    concurrent: int
    late: int
    emails: int
    answered: int
    covered: int
    missing: list[tuple[str, str]]
    doubled: dict[tuple[str, str], int]
    unexpected: dict[tuple[str, str], int]
    kills: list[str]
    crashes: list[str]
    broker_restarts: list[str]
    injected: dict[str, int]
    reply_calls: int
    ledger_states: dict[str, int]
    dead_letters: int
    worker_logs: dict[str, int]
    snapshots: list[Snapshot]
    phases: list[tuple[str, float]]
    replayed: str
    catch_ups: list[list[int]]
    duration_s: float
    started: datetime
    run_dir: Path
    findings: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            not self.missing
            and not self.doubled
            and not self.unexpected
            and self.emails == self.messages - self.covered
            and not self.load.never_accepted
            and self.settled
        )

    @property
    def settled(self) -> bool:
        """The workers went idle after the last phase (nothing was still moving)."""
        return bool(self.snapshots) and self.snapshots[-1].quiet

    def lines(self) -> list[str]:
        o = self.opts
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.load.statuses.items()))
        rows = [
            ("result", "PASS" if self.passed else "FAIL"),
            ("messages", f"{self.messages:,}"),
            (
                "deliveries sent (incl. duplicates)",
                f"{self.deliveries:,} ({self.concurrent:,} concurrent and {self.late:,} late "
                f"duplicates, {o.late_duplicate_delay_s:g}-{1.5 * o.late_duplicate_delay_s:g} s "
                f"later); {self.load.accepted:,} accepted",
            ),
            ("out of order", f"{self.out_of_order:,} messages arrived after a later one"),
            (
                "POSTs to ingest",
                f"{self.load.attempts:,} ({statuses}); {self.load.retried:,} "
                "deliveries needed a retry",
            ),
            ("deliveries never accepted", f"{len(self.load.never_accepted):,}"),
            ("settled at the end", "yes" if self.settled else "NO: lag or sends still moving"),
            ("emails", f"{self.emails:,}"),
            ("distinct answered", f"{self.answered:,}"),
            ("covered by a burst reply", f"{self.covered:,}"),
            ("missing", f"{len(self.missing):,}"),
            ("doubled", f"{len(self.doubled):,} messages with more than one email"),
            ("emails to unknown messages", f"{len(self.unexpected):,}"),
            ("worker kills (SIGKILL)", f"{len(self.kills)}: {', '.join(self.kills) or '-'}"),
            ("worker exits on their own", f"{len(self.crashes)}: {', '.join(self.crashes) or '-'}"),
            (
                "broker restarts",
                f"{len(self.broker_restarts)}: {', '.join(self.broker_restarts) or '-'}",
            ),
            (
                "AgentMail faults",
                f"{self.injected.get('5xx', 0):,} 5xx without sending, "
                f"{self.injected.get('lost', 0):,} responses lost after sending, "
                f"{self.injected.get('spikes', 0)} latency spikes over the send timeout, "
                f"latency 0-{o.latency_ms:g} ms; {self.reply_calls:,} reply calls",
            ),
            (
                "emails after each phase",
                "; ".join(
                    f"{s.phase}: {s.emails:,}{'' if s.quiet else ' (NOT quiet)'}"
                    for s in self.snapshots
                ),
            ),
            (
                "replay",
                f"{int(self.replayed):,} records replayed"
                if self.replayed.isdigit()
                else self.replayed or "-",
            ),
            ("catch-up", self.catch_up_line()),
            (
                "ledger records",
                ", ".join(f"{k} {v:,}" for k, v in sorted(self.ledger_states.items())),
            ),
            ("dead letters", f"{self.dead_letters:,}"),
            ("worker log counts", ", ".join(f"{k} {v:,}" for k, v in self.worker_logs.items())),
            ("phases", ", ".join(f"{name} {s:.0f} s" for name, s in self.phases)),
            ("duration", f"{self.duration_s:.0f} s ({self.duration_s / 60:.1f} min)"),
        ]
        width = max(len(k) for k, _ in rows)
        out = [f"chaos run, {o.size}: {o.command()}"]
        out += [f"  {k.ljust(width)}  {v}" for k, v in rows]
        for label, items in (
            ("missing", [f"{m} in {i}" for i, m in self.missing]),
            ("doubled", [f"{m} in {i}: {c} emails" for (i, m), c in self.doubled.items()]),
            ("unknown", [f"{m} in {i}: {c} emails" for (i, m), c in self.unexpected.items()]),
            ("never accepted", self.load.never_accepted),
        ):
            if items:
                out.append(
                    f"  {label}: " + ", ".join(items[:20]) + (" ..." if len(items) > 20 else "")
                )
        return out

    def catch_up_line(self) -> str:
        if not self.catch_ups:
            return "-"
        found, answered, skipped, by_agent, already, pending = (
            sum(column) for column in zip(*self.catch_ups, strict=True)
        )
        return (
            f"{len(self.catch_ups)} inboxes: found {found:,}, answered {answered:,}, skipped "
            f"{skipped:,} ({by_agent:,} sent by the agent, {already:,} already answered), "
            f"pending {pending:,}"
        )

    def markdown(self) -> str:
        load = os.getloadavg()
        body = [
            f"# Chaos run, {self.started:%Y-%m-%d}, {self.opts.size}",
            "",
            "```",
            *self.lines(),
            "```",
            "",
            f"- command: `{self.opts.command()}` (from the repository root)",
            f"- started {self.started.isoformat(timespec='seconds')}; machine: "
            f"{os.cpu_count()} cores, {platform.platform()}, Python "
            f"{platform.python_version()}; load average at the end "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            "- what runs and how the verdict is made: the docstring of `chaos/run.py`",
        ]
        if self.timeline:
            body += ["", "## Timeline (s since the start)", "", "```", *self.timeline, "```"]
        return "\n".join(body) + "\n"


# --------------------------------------------------------------------------- CLI


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", default=10_000, show_default=True, help="Distinct messages.")
@click.option("--threads", default=500, show_default=True)
@click.option("--inboxes", default=5, show_default=True)
@click.option("--workers", default=2, show_default=True, help="onceonly worker processes.")
@click.option("--kills", default=5, show_default=True, help="Worker SIGKILLs during the load.")
@click.option("--broker-restarts", default=1, show_default=True)
@click.option("--duplicates", default=0.30, show_default=True, help="Share delivered twice.")
@click.option("--out-of-order", default=0.20, show_default=True, help="Share out of order.")
@click.option("--rate", default=40.0, show_default=True, help="New messages per second.")
@click.option(
    "--late-duplicate-delay-s",
    type=float,
    default=None,
    help="Late duplicates come this to 1.5x this later [default: 120 at 10,000 messages or "
    "more, else 20].",
)
@click.option(
    "--window-ms",
    default=0,
    show_default=True,
    help="ONCEONLY_REORDER_WINDOW_MS of the workers (0: no bursts, one email per message).",
)
@click.option("--fail-rate", default=0.03, show_default=True, help="Reply calls answered 5xx.")
@click.option("--lose-rate", default=0.02, show_default=True, help="Replies sent, answer lost.")
@click.option("--latency-ms", default=30.0, show_default=True, help="Random latency up to.")
@click.option(
    "--latency-spikes",
    default=None,
    type=int,
    help="Spikes past the send timeout [default: 3, 1 below 10,000 messages].",
)
@click.option("--send-timeout-s", default=3.0, show_default=True)
@click.option("--broker-down-s", default=5.0, show_default=True)
@click.option("--concurrency", default=64, show_default=True, help="POSTs in flight at most.")
@click.option("--delivery-timeout-s", default=600.0, show_default=True)
@click.option("--drain-timeout-s", default=1200.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed; default: random).")
@click.option("--run-dir", type=click.Path(path_type=Path), default=None)
@click.option("--keep", is_flag=True, help="Keep the run directory even if the run passes.")
@click.option("--record", is_flag=True, help="Write chaos/results/<date>-<size>.md too.")
def main(**kwargs: Any) -> None:
    """Chaos run: real broker, ingest, workers and a faulty AgentMail; exactly one email per
    message at the end, or a non-zero exit."""
    big = kwargs["messages"] >= 10_000
    if kwargs["late_duplicate_delay_s"] is None:
        kwargs["late_duplicate_delay_s"] = 120.0 if big else 20.0
    if kwargs["latency_spikes"] is None:
        kwargs["latency_spikes"] = 3 if big else 1
    if kwargs["seed"] is None:
        kwargs["seed"] = random.SystemRandom().randrange(1_000_000)
    opts = Options(**kwargs)
    if opts.messages < 1 or opts.workers < 1 or opts.rate <= 0:
        raise click.BadParameter("need at least one message, one worker and a positive rate")
    if opts.run_dir is not None:
        opts.run_dir.mkdir(parents=True, exist_ok=True)
        run_dir = opts.run_dir.resolve()
    else:
        run_dir = Path(tempfile.mkdtemp(prefix=f"onceonly-chaos-{opts.size}-"))
    chaos = Chaos(opts, run_dir)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    code = 2
    verdict: Verdict | None = None
    try:
        verdict = asyncio.run(chaos.run())
        code = 0 if verdict.passed else 1
    except ChaosError as exc:
        click.echo(f"chaos: the run could not be carried out: {exc}", err=True)
    except KeyboardInterrupt:
        click.echo("chaos: interrupted", err=True)
        code = 130
    except Exception:
        click.echo("chaos: the run broke:\n" + traceback.format_exc(), err=True)
    finally:
        for worker in chaos.workers:
            worker.stop(10)
        for proc in (chaos.ingest, chaos.mail):
            if proc is not None:
                proc.stop(10)
        chaos.broker.stop()
    if verdict is not None:
        text = "\n".join(verdict.lines())
        (run_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
        if verdict.findings:
            (run_dir / "findings.txt").write_text("\n".join(verdict.findings), encoding="utf-8")
        click.echo("")
        click.echo(text)
        if opts.record:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            path = RESULTS_DIR / f"{verdict.started:%Y-%m-%d}-{opts.size}.md"
            path.write_text(verdict.markdown(), encoding="utf-8")
            click.echo(f"recorded in {path.relative_to(ROOT)}")
    if code == 0 and not opts.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        click.echo(f"run directory kept: {run_dir}")
    sys.exit(code)


if __name__ == "__main__":
    main()

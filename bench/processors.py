"""Processor benchmark: what dedupe, reorder and reply cost next to a faust agent that only counts.

``python -m bench.processors`` measures, in one run, on one machine:

(1) a plain faust agent (``bench._plain_faust``, concurrency 1, the App built as
    onceonly's) that only counts events: events/s from its first event to its last;
(2) ``onceonly worker`` (``python -m onceonly worker``, a real process) with
    ``ONCEONLY_REORDER_WINDOW_MS=0`` and an instant mail server (``bench._instant_mail``,
    AgentMail's reply endpoint answering at once): replies/s from the first reply the
    mail server receives to the last. Every record is a distinct ``message.received``
    event, so each one is deduped, recorded, replied to and recorded as sent;
(3) the worker's RSS (its whole process group, from ``/proc``) once it holds
    ``--dedupe-entries`` more dedupe entries: that many distinct Stripe events, produced
    in batches while the same worker runs, which it dedupes and records without any
    effect (no handler for Stripe). If that takes longer than ``--rss-budget``, the RSS
    is read at the entries reached and extrapolated to the target, and the report says
    so in capitals;
(4) restart-to-first-event with that state: the worker is SIGKILLed (a crash), started
    again on the same data directory and app id, one new AgentMail event is produced,
    and the time from the new process's start to that event's reply is measured; then
    the same after a SIGTERM (a clean stop), for comparison.

Both (1) and (2) read the same ``--events`` records, produced before either starts.
The broker is an :class:`~devstack.broker.EmbeddedBroker` on a free port in a temporary
run directory, or the cluster named by ``ONCEONLY_KAFKA_BOOTSTRAP``; the topics and app
ids are fresh for every run (``onceonly-bench-<tag>.*``).

Targets (the issue): (2)/(1) >= 0.5 and (2) >= 2,000 replies/s per worker; (3) < 300 MB.
The figures are printed and written to ``bench/results/processors-<date>.md`` (and
``.png``); ``python -m bench`` (``make bench``) runs this after the ingest benchmark and
writes one report of both.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import secrets
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from bench._load import agentmail_body
from bench._procs import (
    BenchError,
    Broker,
    CpuWindow,
    ServerProcess,
    console,
    create_topics,
    kafka,
    loadavg,
    revision,
)
from bench._report import (
    CONTENDED_PERCENT,
    Comparison,
    Figure,
    ProcessorOptions,
    Section,
    about,
    command_line,
    execute,
    met,
    processor_options,
    results_dir_option,
    write_report,
)
from bench._report import fmt_cpu as _cpu

TARGET_RATIO = 0.5
TARGET_REPLIES_PER_S = 2000.0
TARGET_RSS_MB = 300.0
#: How long without progress before a phase is declared stuck.
STALL_S = 90.0
#: The same for a restart, which with a large table may take minutes.
RESTART_STALL_S = 900.0
#: Calls of the SDK alone, (5).
SDK_CALLS = 2000

if TYPE_CHECKING:
    from schemas.envelope import Envelope

Record = tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]  # key, value, headers


# --------------------------------------------------------------------------- records


def as_record(envelope: Envelope) -> Record:
    """The record ingest produces for an envelope: keyed by thread, with its headers."""
    headers: list[tuple[str, str | bytes | None]] = [*envelope.headers()]
    return envelope.thread_key.encode(), envelope.encode(), headers


def agentmail_records(count: int, start: int = 0) -> Iterator[Record]:
    """What ingest produces for ``count`` distinct AgentMail ``message.received`` events
    (~1.5 KB bodies, 1024 threads, every message and event id distinct)."""
    from ingest import normalise

    now = datetime.now(UTC)
    for n in range(start, start + count):
        envelope = normalise.agentmail(agentmail_body(n, now).decode(), {}, now)
        yield as_record(envelope)


def stripe_records(count: int, tag: str) -> Iterator[Record]:
    """What ingest produces for ``count`` distinct Stripe ``invoice.paid`` events, one
    invoice (so one thread key) each: deduped and recorded, no effect handler."""
    from ingest import normalise

    now = datetime.now(UTC)
    created = int(now.timestamp())
    for n in range(count):
        body = json.dumps(
            {
                "id": f"evt_{tag}{n:010d}",
                "object": "event",
                "api_version": "2024-06-20",
                "created": created,
                "type": "invoice.paid",
                "livemode": False,
                "data": {
                    "object": {
                        "id": f"in_{tag}{n:010d}",
                        "object": "invoice",
                        "amount_paid": 4200,
                        "currency": "eur",
                        "customer": f"cus_{n % 5000:06d}",
                    }
                },
            }
        )
        envelope = normalise.stripe(body, {}, now)
        yield as_record(envelope)


def produce(bootstrap: str, topic: str, records: Iterator[Record], total: int) -> float:
    """Produce every record with confluent-kafka in a tight loop (batched, acks=all);
    return the seconds it took. Raises BenchError if any record is not stored."""
    from confluent_kafka import Producer

    from foundation.kafka import producer_config

    failures: list[str] = []

    def on_error(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        producer_config(
            bootstrap,
            timeout_ms=120_000,
            max_record_bytes=8 * 1024 * 1024,
            linger_ms=20,
            **{
                "batch.num.messages": 10_000,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 500_000,
                "queue.buffering.max.kbytes": 512 * 1024,
                "delivery.report.only.error": True,
                "on_delivery": on_error,
                "log_level": 3,
            },
        )
    )
    started = time.perf_counter()
    report = max(total // 10, 1)
    for n, (key, value, headers) in enumerate(records, 1):
        while True:
            try:
                producer.produce(topic, value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)
        if total >= 100_000 and n % report == 0:
            console.print(f"  produced {n:,} of {total:,} …")
    left = producer.flush(120)
    if left or failures:
        raise BenchError(
            f"{left} records were not acknowledged and {len(failures)} failed "
            f"({failures[:3]}) producing to {topic}; see the broker log"
        )
    return time.perf_counter() - started


def ledger_sent(bootstrap: str, topic: str, partitions: int) -> int:
    """Distinct reply keys whose latest ledger record says ``sent``, read from the topic."""
    from foundation.kafka import read_to_end

    latest: dict[bytes, str] = {}
    for msg in read_to_end(bootstrap, topic, timeout_s=60):
        key, value = msg.key(), msg.value()
        if key is not None and value is not None:
            latest[key] = json.loads(value).get("state", "")
    return sum(1 for state in latest.values() if state == "sent")


# --------------------------------------------------------------------------- processes


def base_env(extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without any ONCEONLY_* variable (nor an AgentMail key)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("ONCEONLY_") and k.upper() != "AGENTMAIL_API_KEY"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def get_json(url: str, timeout_s: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def scrape(port: int) -> dict[str, float] | None:
    """The worker's /metrics samples (name with labels -> value), None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def group_rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB summed over the process group led by ``pid`` (the worker and
    any child it started)."""
    rss = hwm = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii")
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp != pid:
                continue
            for line in (entry / "status").read_text(encoding="ascii").splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return rss / 1024, hwm / 1024


def kill_hard(process: ServerProcess) -> None:
    """SIGKILL the process group, as a crash would, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.stop()  # reaps it: the group is already gone


def check_alive(process: ServerProcess, what: str) -> None:
    if not is_alive(process):
        raise BenchError(f"{process.name} exited while {what}; its output:\n{process.log_tail()}")


def is_alive(process: ServerProcess) -> bool:
    """Whether the process runs (read from /proc, so that it is not reaped here)."""
    try:
        stat = Path(f"/proc/{process.pid}/stat").read_text(encoding="ascii")
    except (BenchError, OSError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_progress(
    read: Callable[[], int],
    target: int,
    *,
    what: str,
    process: ServerProcess,
    every_s: float,
    on_sample: Callable[[int], None] | None = None,
    stall_s: float = STALL_S,
) -> None:
    """Poll ``read()`` until it reaches ``target``; fail if it stops moving for ``stall_s``."""
    last_value = -1
    last_move = time.monotonic()
    while True:
        value = read()
        if on_sample is not None:
            on_sample(value)
        if value >= target:
            return
        if value != last_value:
            last_value, last_move = value, time.monotonic()
        elif time.monotonic() - last_move > stall_s:
            raise BenchError(
                f"{what}: stuck at {value:,} of {target:,} for {stall_s:g} s; "
                f"{process.name} output:\n{process.log_tail()}"
            )
        check_alive(process, what)
        time.sleep(every_s)


# --------------------------------------------------------------------------- figures


@dataclass(slots=True)
class Drain:
    """A phase that drained ``count`` records; ``cpu`` in % of one core over the drain."""

    label: str
    count: int
    seconds: float  #: first event to last
    startup_s: float  #: process start to its first event
    cpu: dict[str, float] = field(default_factory=dict)
    process: str = "worker"  #: the key of the process under test in ``cpu``

    @property
    def rate(self) -> float:
        return (self.count - 1) / self.seconds if self.seconds > 0 else math.nan

    @property
    def cpu_ms(self) -> float:
        """CPU time of the process under test per event, in ms."""
        share = self.cpu.get(self.process, math.nan) / 100
        return 1000 * share / self.rate if self.rate else math.nan

    def describe(self) -> str:
        start = (
            f"; its first event {self.startup_s:.1f} s after its start"
            if not math.isnan(self.startup_s)
            else ""
        )
        return (
            f"{self.label}: {self.rate:,.0f} events/s ({self.count:,} in {self.seconds:.2f} s, "
            f"{self.cpu_ms:.2f} ms of CPU per event{start}; CPU, % of one core: "
            f"{_cpu(self.cpu)})"
        )


@dataclass(slots=True)
class Memory:
    target: int  #: dedupe entries asked for
    entries: int  #: dedupe entries the worker held when RSS was read
    rss_mb: float
    hwm_mb: float
    drain: Drain | None = None
    growth: list[tuple[int, float]] = field(default_factory=list)  #: (entries, RSS MB)
    budget_s: float = math.nan
    after_restart_mb: float = math.nan

    @property
    def complete(self) -> bool:
        return self.entries >= self.target

    @property
    def extrapolated_mb(self) -> float:
        """RSS at ``target`` entries by a straight line through the second half of the
        growth samples (NaN when the target was reached, or too few samples)."""
        if self.complete:
            return math.nan
        points = [(n, mb) for n, mb in self.growth if n >= self.entries / 2]
        if len(points) < 2 or points[-1][0] == points[0][0]:
            return math.nan
        mean_n = sum(n for n, _ in points) / len(points)
        mean_mb = sum(mb for _, mb in points) / len(points)
        slope = sum((n - mean_n) * (mb - mean_mb) for n, mb in points) / sum(
            (n - mean_n) ** 2 for n, _ in points
        )
        return self.rss_mb + max(slope, 0.0) * (self.target - self.entries)


@dataclass(slots=True)
class Restart:
    how: str
    entries: int
    first_s: float  #: process start to the new event's reply
    web_s: float  #: process start to /metrics answering
    marks: dict[str, float] = field(default_factory=dict)  #: faust's log lines, s after start
    all_partitions_s: float = math.nan  #: process start to a reply on every partition


@dataclass(slots=True)
class Results:
    events: int
    partitions: int
    plain: Drain | None = None
    worker: Drain | None = None
    ledger_sent: int = 0
    replies_metric: float = math.nan
    replayed: int = 0
    memory: Memory | None = None
    restarts: list[Restart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    sdk_ms: float = math.nan  #: (5) ms of CPU per reply of the SDK call alone

    @property
    def ratio(self) -> float:
        if self.plain is None or self.worker is None or not self.plain.rate:
            return math.nan
        return self.worker.rate / self.plain.rate


#: faust log lines that mark the steps of a worker's start, and what to call them.
LOG_MARKS = {
    "[^Worker]: Starting": "faust starting (imports done)",
    "(Re-)joining group": "joining the consumer group",
    "Joined group": "joined",
    "[^Worker]: Ready": "ready (tables recovered)",
}
_LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[\d+\] \[\w+\] (.*)$")


def log_marks(log_path: Path, started: float) -> dict[str, float]:
    """Seconds from ``started`` (wall clock) to the first log line of each LOG_MARKS step."""
    marks: dict[str, float] = {}
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return marks
    for line in text.splitlines():
        found = _LOG_LINE.match(line)
        if found is None:
            continue
        for needle, name in LOG_MARKS.items():
            if name not in marks and needle in found.group(2):
                # faust logs local time, as time.localtime gives it on this machine
                stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                marks[name] = stamp - started
        if len(marks) == len(LOG_MARKS):
            break
    return marks


# --------------------------------------------------------------------------- the phases

NO_HANDLER = 'onceonly_skips_total{reason="no_handler"}'
#: Stripe events produced at a time in (3): the next batch goes out once half is consumed.
FILL_CHUNK = 20_000


@dataclass
class Bench:
    work: Path
    bootstrap: str
    topics: dict[str, str]
    tag: str
    partitions: int
    log_level: str
    broker_pid: int | None = None
    mail_port: int = 0
    worker_port: int = 0
    mail: ServerProcess | None = None
    worker: ServerProcess | None = None
    plain: ServerProcess | None = None
    starts: int = 0

    @property
    def deliveries(self) -> str:
        return self.topics["ONCEONLY_DELIVERIES_TOPIC"]

    def cpu_pids(self, name: str, pid: int) -> dict[str, int | None]:
        pids: dict[str, int | None] = {name: pid}
        if self.mail is not None:
            pids["mail"] = self.mail.pid
        if self.broker_pid is not None:
            pids["broker"] = self.broker_pid
        pids["bench"] = None
        return pids

    # -- (1) the plain agent ------------------------------------------------------------

    def run_plain(self, count: int) -> Drain:
        out = self.work / "plain.json"
        self.plain = ServerProcess(
            "plain faust agent",
            [
                sys.executable,
                "-m",
                "bench._plain_faust",
                "--bootstrap",
                self.bootstrap,
                "--topic",
                self.deliveries,
                "--app-id",
                f"onceonly-bench-{self.tag}-plain",
                "--data-dir",
                str(self.work / "plain-data"),
                "--partitions",
                str(self.partitions),
                "--expect",
                str(count),
                "--out",
                str(out),
                "--loglevel",
                self.log_level.lower(),
            ],
            base_env({}),
            self.work / "plain.log",
        )
        started = time.time()
        self.plain.start()
        cpu: CpuWindow | None = None

        def read() -> int:
            nonlocal cpu
            try:
                data = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return 0
            if cpu is None:
                assert self.plain is not None
                cpu = CpuWindow(self.cpu_pids("agent", self.plain.pid))
                cpu.begin()
            return int(data["count"])

        wait_progress(read, count, what="(1) draining", process=self.plain, every_s=0.02)
        assert cpu is not None
        cpu.end()
        data = json.loads(out.read_text(encoding="utf-8"))
        self.plain.stop()
        self.plain = None
        return Drain(
            "(1) plain faust agent, counts only",
            count,
            data["last"] - data["first"],
            data["first"] - started,
            cpu.percent,
            process="agent",
        )

    # -- the worker and the mail server ------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        return base_env(
            {
                "ONCEONLY_KAFKA_BOOTSTRAP": self.bootstrap,
                "ONCEONLY_PARTITIONS": str(self.partitions),
                "ONCEONLY_APP_ID": f"onceonly-bench-{self.tag}",
                "ONCEONLY_DATA_DIR": str(self.work / "worker-data"),
                "ONCEONLY_RUN_DIR": str(self.work / "worker-run"),
                "ONCEONLY_REORDER_WINDOW_MS": "0",
                "ONCEONLY_WORKER_HOST": "127.0.0.1",
                "ONCEONLY_WORKER_PORT": str(self.worker_port),
                "ONCEONLY_AGENTMAIL_BASE_URL": f"http://127.0.0.1:{self.mail_port}",
                "AGENTMAIL_API_KEY": "bench-not-a-real-key",
                "ONCEONLY_LOG_LEVEL": self.log_level,
                **self.topics,
            }
        )

    def start_worker(self) -> float:
        """Start ``onceonly worker``; return the wall-clock time just before it was spawned."""
        self.starts += 1
        self.worker = ServerProcess(
            "onceonly worker",
            [sys.executable, "-m", "onceonly", "worker"],
            self.worker_env(),
            self.work / f"worker-{self.starts}.log",
        )
        started = time.time()
        self.worker.start()
        return started

    def mail_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = get_json(f"http://127.0.0.1:{self.mail_port}/_control/stats")
        return stats

    def start_mail(self) -> None:
        from devstack.broker import free_port

        self.mail_port = free_port()
        self.worker_port = free_port()
        self.mail = ServerProcess(
            "instant mail server",
            [sys.executable, "-m", "bench._instant_mail", "--port", str(self.mail_port)],
            base_env({}),
            self.work / "mail.log",
        )
        self.mail.start()
        asyncio.run(self.mail.wait_ready(f"http://127.0.0.1:{self.mail_port}/healthz"))

    def worker_metric(self, name: str, timeout_s: float = 30.0, want: float | None = None) -> float:
        """A sample of the worker's /metrics; waits for it to reach ``want`` if given."""
        deadline = time.monotonic() + timeout_s
        value = math.nan
        while time.monotonic() < deadline:
            samples = scrape(self.worker_port)
            if samples is not None:
                value = samples.get(name, 0.0)
                if want is None or value >= want:
                    return value
            time.sleep(0.2)
        return value

    # -- (2) replies ------------------------------------------------------------------------

    def run_replies(self, count: int) -> Drain:
        started = self.start_worker()
        worker = self.worker
        assert worker is not None
        cpu: CpuWindow | None = None

        def read() -> int:
            nonlocal cpu
            sent = int(self.mail_stats()["sent"])
            if sent and cpu is None:
                cpu = CpuWindow(self.cpu_pids("worker", worker.pid))
                cpu.begin()
            return sent

        wait_progress(read, count, what="(2) replying", process=worker, every_s=0.05)
        assert cpu is not None
        cpu.end()
        stats = self.mail_stats()
        return Drain(
            "(2) onceonly worker: dedupe, reorder (window 0), reply",
            count,
            stats["last"] - stats["first"],
            stats["first"] - started,
            cpu.percent,
        )

    # -- (3) memory -------------------------------------------------------------------------

    def run_memory(self, target: int, held: int, budget_s: float) -> Memory:
        """Produce ``target`` distinct Stripe events in batches while the running worker
        records them, within ``budget_s``; then read its RSS. ``held``: entries it had."""
        worker = self.worker
        assert worker is not None
        records = stripe_records(target, self.tag)
        chunk = min(FILL_CHUNK, target)
        produced = done = 0
        growth: list[tuple[int, float]] = []
        first: tuple[float, int] | None = None
        cpu: CpuWindow | None = None
        began = time.monotonic()
        next_sample = began + 15
        last_move, last_done = began, -1
        while True:
            samples = scrape(self.worker_port)
            if samples is not None:
                done = int(samples.get(NO_HANDLER, 0.0))
            now = time.time()
            if done and first is None:
                first = (now, done)
                cpu = CpuWindow(self.cpu_pids("worker", worker.pid))
                cpu.begin()
            out_of_time = time.monotonic() - began > budget_s
            if produced < target and not out_of_time and done >= produced - chunk // 2:
                n = min(chunk, target - produced)
                produce(self.bootstrap, self.deliveries, itertools.islice(records, n), n)
                produced += n
                continue
            if done >= produced and (produced >= target or out_of_time):
                break
            if time.monotonic() >= next_sample:
                rss, _ = group_rss_mb(worker.pid)
                growth.append((held + done, rss))
                console.print(
                    f"  (3) {done:,} recorded of {produced:,} produced ({target:,} wanted), "
                    f"RSS {rss:.0f} MB, {time.monotonic() - began:.0f} s"
                )
                next_sample = time.monotonic() + 15
            if done != last_done:
                last_move, last_done = time.monotonic(), done
            elif time.monotonic() - last_move > STALL_S:
                raise BenchError(
                    f"(3) recording: stuck at {done:,} of {produced:,} for {STALL_S:g} s "
                    f"(/metrics on port {self.worker_port}); worker output:\n{worker.log_tail()}"
                )
            check_alive(worker, "(3) recording")
            time.sleep(1.0)
        assert first is not None and cpu is not None
        cpu.end()
        drain = Drain(
            "(3) onceonly worker: dedupe + record only (Stripe, no effect handler)",
            done - first[1] + 1,  # the events between the first sample and the last
            now - first[0],
            math.nan,
            cpu.percent,
        )
        time.sleep(3)  # let the last changelog batches and memtables settle
        rss, hwm = group_rss_mb(worker.pid)
        growth.append((held + done, rss))
        return Memory(held + target, held + done, rss, hwm, drain, growth, budget_s)

    # -- (4) restart ------------------------------------------------------------------------

    def run_restart(self, how: str, entries: int, next_n: int) -> Restart:
        worker = self.worker
        assert worker is not None
        before = int(self.mail_stats()["sent"])
        if how == "SIGKILL":
            kill_hard(worker)
        else:
            worker.stop(timeout_s=60)
        started = self.start_worker()
        worker = self.worker
        assert worker is not None
        produce(self.bootstrap, self.deliveries, agentmail_records(1, start=next_n), 1)
        web_s = math.nan

        def read() -> int:
            nonlocal web_s
            if math.isnan(web_s) and scrape(self.worker_port) is not None:
                web_s = time.time() - started
            return int(self.mail_stats()["sent"]) - before

        # a restart with a large table may legitimately take minutes: allow for it
        wait_progress(
            read,
            1,
            what=f"(4) restart after {how}",
            process=worker,
            every_s=0.01,
            stall_s=RESTART_STALL_S,
        )
        first_s = float(self.mail_stats()["last"]) - started
        restart = Restart(how, entries, first_s, web_s, log_marks(worker.log_path, started))
        # then one new event on every partition: each partition's first record after a
        # start also runs that partition's dedupe expiry sweep
        produce_one_per_partition(
            self.bootstrap, self.deliveries, self.partitions, next_n + 1, self.partitions
        )
        wait_progress(
            lambda: int(self.mail_stats()["sent"]) - before - 1,
            self.partitions,
            what=f"(4) one event per partition after {how}",
            process=worker,
            every_s=0.05,
            stall_s=RESTART_STALL_S,
        )
        restart.all_partitions_s = float(self.mail_stats()["last"]) - started
        return restart

    def stop_all(self) -> None:
        for process in (self.plain, self.worker, self.mail):
            if process is not None:
                with contextlib.suppress(Exception):
                    process.stop(timeout_s=30)


def produce_one_per_partition(
    bootstrap: str, topic: str, partitions: int, start: int, count: int
) -> None:
    """``count`` new AgentMail events, the i-th on partition i (its key may hash elsewhere,
    which the worker does not check)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for i, (key, value, headers) in enumerate(agentmail_records(count, start=start)):
        producer.produce(topic, value, key=key, headers=headers, partition=i % partitions)
    if producer.flush(30):
        raise BenchError(f"could not produce the per-partition events to {topic}")


# --------------------------------------------------------------------------- the report


def sdk_cost_ms(base_url: str, calls: int = SDK_CALLS) -> float:
    """(5) ms of CPU per reply of the SDK call alone: ``AgentMailSender.reply`` (the worker's
    sender: the SDK over ``processors.agentmail.transport.ApiClient``), ``calls`` times one
    after the other in this process, against the instant mail server. 1000 / this is the most
    replies one Python process could send per second if it did nothing else."""
    from processors.agentmail.sender import AgentMailSender
    from schemas.ledger import ReplyRecord, ReplyState

    def record(n: int) -> ReplyRecord:
        return ReplyRecord(
            key=f"reply-sdk-{n}",
            inbox_id="agent@bench.agentmail.to",
            message_id=f"<sdk-{n}@bench>",
            thread_key=f"agentmail:thr_{n % 1024:04d}",
            state=ReplyState.PENDING,
            created_at=datetime.now(UTC),
            reply_text="Thanks for your message; we will get back to you shortly.",
        )

    async def run() -> float:
        sender = AgentMailSender("bench", base_url=base_url, timeout_s=10.0)
        try:
            for n in range(50):  # connections and caches warm
                await sender.reply(record(-1 - n))
            began = time.process_time()
            for n in range(calls):
                await sender.reply(record(n))
            return (time.process_time() - began) / calls * 1000
        finally:
            await sender.aclose()

    return asyncio.run(run())


def figures(r: Results) -> list[tuple[str, str, str, str]]:
    """(figure, measured, target, verdict) rows."""
    rows: list[tuple[str, str, str, str]] = []
    if r.plain is not None:
        rows.append(("(1) plain faust agent, events/s", f"{r.plain.rate:,.0f}", "", ""))
    if r.worker is not None:
        rows.append(("(2) onceonly worker, replies/s", f"{r.worker.rate:,.0f}", "", ""))
        rows.append(
            (
                "(2)/(1)",
                f"{r.ratio:.3f}",
                f">= {TARGET_RATIO}",
                met(r.ratio >= TARGET_RATIO),
            )
        )
        rows.append(
            (
                "replies/s per worker",
                f"{r.worker.rate:,.0f}",
                f">= {TARGET_REPLIES_PER_S:,.0f}",
                met(r.worker.rate >= TARGET_REPLIES_PER_S),
            )
        )
    m = r.memory
    if m is not None:
        if m.complete:
            rows.append(
                (
                    f"(3) worker RSS with {m.entries:,} dedupe entries (peak)",
                    f"{m.rss_mb:.0f} MB ({m.hwm_mb:.0f} MB)",
                    f"< {TARGET_RSS_MB:.0f} MB",
                    met(max(m.rss_mb, m.hwm_mb) < TARGET_RSS_MB),
                )
            )
        else:
            rows.append(
                (
                    f"(3) worker RSS with {m.entries:,} dedupe entries, MEASURED (peak)",
                    f"{m.rss_mb:.0f} MB ({m.hwm_mb:.0f} MB)",
                    "",
                    "",
                )
            )
            rows.append(
                (
                    f"(3) worker RSS with {m.target:,} entries, EXTRAPOLATED",
                    f"{m.extrapolated_mb:.0f} MB",
                    f"< {TARGET_RSS_MB:.0f} MB",
                    met(m.extrapolated_mb < TARGET_RSS_MB) + " (extrapolated)",
                )
            )
    for s in r.restarts:
        rows.append(
            (
                f"(4) restart-to-first-event after {s.how}, {s.entries:,} entries",
                f"{s.first_s:.2f} s",
                "",
                "",
            )
        )
    if not math.isnan(r.sdk_ms):
        ceiling = 1000 / r.sdk_ms
        rows.append(("(5) the SDK call alone, ms of CPU per reply", f"{r.sdk_ms:.2f}", "", ""))
        rows.append(
            (
                "(5) one process's ceiling from the SDK alone, replies/s",
                f"{ceiling:,.0f}",
                f">= {TARGET_REPLIES_PER_S:,.0f}",
                met(ceiling >= TARGET_REPLIES_PER_S),
            )
        )
    return rows


def thin(points: list[tuple[int, float]], most: int) -> list[tuple[int, float]]:
    """At most ``most`` of ``points``, evenly spaced, the first and the last among them."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


def summary(r: Results) -> list[str]:
    lines: list[str] = []
    for drain in (r.plain, r.worker):
        if drain is not None:
            lines.append(drain.describe())
    if r.worker is not None:
        lines.append(
            f"checks: {r.ledger_sent:,} replies recorded sent in the ledger topic, "
            f"onceonly_replies_sent_total = {r.replies_metric:,.0f}, "
            f"{r.replayed} replayed sends at the mail server"
        )
    m = r.memory
    if m is not None:
        if m.drain is not None:
            lines.append(m.drain.describe())
        if not m.complete:
            lines.append(
                f"(3) NOT THE FULL {m.target:,} ENTRIES: within the {m.budget_s:g} s budget "
                f"(--rss-budget) the worker recorded {m.entries:,}; the RSS at {m.target:,} is "
                "EXTRAPOLATED along a straight line through the later growth samples below "
                "(RocksDB's caches are bounded, so the line, if anything, overstates it)"
            )
        if m.growth:
            lines.append(
                "(3) RSS while recording (entries → MB): "
                + ", ".join(f"{n:,} → {mb:.0f}" for n, mb in thin(m.growth, 12))
            )
        if not math.isnan(m.after_restart_mb):
            lines.append(
                f"(3) RSS right after the SIGKILL restart with that state = "
                f"{m.after_restart_mb:.0f} MB"
            )
    for s in r.restarts:
        steps = ", ".join(f"{name} {t:.2f} s" for name, t in s.marks.items())
        lines.append(
            f"(4) restart after {s.how} with {s.entries:,} dedupe entries: the new event was "
            f"answered {s.first_s:.2f} s after the new process was spawned ({steps}; "
            f"/metrics answered at {s.web_s:.2f} s); a new event on each of the "
            f"{r.partitions} partitions, produced after that, all answered by "
            f"{s.all_partitions_s:.2f} s"
        )
    return lines


def print_report(r: Results) -> None:
    table = Table(title="onceonly processor benchmark")
    for i, header in enumerate(("figure", "measured", "target", "")):
        table.add_column(header, justify="left" if i in (0, 3) else "right")
    for row in figures(r):
        table.add_row(*row, style="red" if "NOT met" in row[3] else None)
    console.print()
    console.print(table)
    for line in summary(r):
        console.print(f"[bold red]{line}[/]" if "NOT THE FULL" in line else line)
    for note in r.notes:
        console.print(f"[yellow]{note}[/]")


def section(r: Results) -> Section:
    """The processor benchmark's part of the report: the worker as a ratio to the agent."""
    comparison = None
    if r.plain is not None and r.worker is not None:
        comparison = Comparison(
            "events/s",
            Figure("worker", "onceonly worker (replies)", r.worker.rate),
            (Figure("plain", "plain faust agent (counts)", r.plain.rate),),
            {"plain": TARGET_RATIO},
        )
    body = [
        "| figure | measured | target | |",
        "| --- | ---: | ---: | --- |",
        *("| " + " | ".join(row) + " |" for row in figures(r)),
        "",
        *(f"- **{line}**" if "NOT THE FULL" in line else f"- {line}" for line in summary(r)),
        *(f"- **{note}**" for note in r.notes),
    ]
    how = [
        f"records: {r.events:,} distinct AgentMail `message.received` envelopes "
        "(~1.5 KB bodies over 1024 threads), made by `ingest.normalise.agentmail` and "
        f"produced before (1) and (2) start, on {r.partitions} partitions; (1) and (2) read "
        "the same records, one after the other, each with a consumer group of its own",
        "(1) `bench._plain_faust`: faust App as onceonly's (session 10 s, heartbeat 1 s, "
        "raw codec, `stream_wait_empty`), memory store, no web server, one agent "
        "(concurrency 1) iterating `stream.events()` and counting; rate from its first "
        "event to its last",
        f"(2) `python -m onceonly worker`, `ONCEONLY_REORDER_WINDOW_MS=0`, log level "
        f"{r.log_level}, real `AgentMailSender` (the SDK, its httpx client "
        "`processors.agentmail.transport.ApiClient` over aiohttp) against "
        "`bench._instant_mail`, which "
        "answers the reply endpoint at once; rate from the first reply the mail server "
        "received to the last (one reply per record)",
        "(3) the same worker, still running: distinct Stripe `invoice.paid` events (one "
        f"invoice each) produced in batches of {FILL_CHUNK:,} (the next once half the last is "
        "recorded) until the wanted number or the time budget; RSS and peak (VmRSS, VmHWM) "
        "summed over the worker's process group from `/proc/<pid>/status` 3 s after the last "
        'event; progress from `onceonly_skips_total{reason="no_handler"}`',
        "(4) SIGKILL (then SIGTERM) of the worker; a new process on the same data directory "
        "and app id; one new AgentMail event produced right after the spawn; time from the "
        "spawn to the mail server receiving its reply; the steps from the worker's own log "
        "lines. Then one new event on each partition",
        f"(5) `AgentMailSender.reply` {SDK_CALLS:,} times one after the other in the benchmark's "
        "own process (after 50 unmeasured), against the same instant mail server: the "
        "process's CPU time over the calls; no Kafka, no faust",
        "CPU: CPU time over the measured window of the process under test, the mail server, "
        "the Kafka JVM (`broker`), this process (`bench`) and everything else on the machine "
        "(`other`), in % of one core; ms of CPU per event = the process's CPU over the events",
    ]
    return Section("Processors", comparison, body, how)


# --------------------------------------------------------------------------- main


def contention(r: Results) -> str | None:
    drains = [d for d in (r.plain, r.worker, r.memory.drain if r.memory else None) if d]
    worst = max((d.cpu.get("other", 0.0) for d in drains), default=0.0)
    if worst < CONTENDED_PERCENT:
        return None
    return (
        f"other work on this machine took up to {worst:.0f}% of a core while figures were "
        "measured (`other` in the CPU figures): rates are lower and noisier than on an idle "
        "machine; the ms of CPU per event are the steadier figure"
    )


def collect(opts: ProcessorOptions, broker: Broker, work: Path) -> Results:
    """Run the processor benchmark against ``broker``, in ``work``; print its figures."""
    from foundation.settings import Settings

    began = time.monotonic()
    partitions = Settings.from_env().partitions
    tag = secrets.token_hex(3)
    r = Results(opts.events, partitions, log_level=opts.log_level)
    bootstrap = broker.bootstrap
    topics = create_topics(bootstrap, partitions, f"onceonly-bench-{tag}")
    bench = Bench(work, bootstrap, topics, tag, partitions, opts.log_level, broker_pid=broker.pid)
    try:
        console.print(f"producing {opts.events:,} AgentMail events to {bench.deliveries} …")
        seconds = produce(bootstrap, bench.deliveries, agentmail_records(opts.events), opts.events)
        console.print(f"produced in {seconds:.1f} s")

        console.print("(1) plain faust agent …")
        r.plain = bench.run_plain(opts.events)
        console.print(f"(1) {r.plain.rate:,.0f} events/s")

        bench.start_mail()
        console.print("(2) onceonly worker, window 0, instant mail server …")
        r.worker = bench.run_replies(opts.events)
        console.print(f"(2) {r.worker.rate:,.0f} replies/s")
        r.replies_metric = bench.worker_metric("onceonly_replies_sent_total", want=opts.events)
        r.replayed = int(bench.mail_stats()["replayed"])
        r.ledger_sent = ledger_sent(bootstrap, topics["ONCEONLY_LEDGER_TOPIC"], partitions)
        console.print(f"(5) the SDK call alone, {SDK_CALLS:,} replies …")
        r.sdk_ms = sdk_cost_ms(f"http://127.0.0.1:{bench.mail_port}")
        console.print(f"(5) {r.sdk_ms:.2f} ms of CPU per reply")
        next_n = entries = opts.events
        if not opts.skip_rss:
            console.print(
                f"(3) {opts.dedupe_entries:,} distinct Stripe events, within "
                f"{opts.rss_budget_s:g} s …"
            )
            r.memory = bench.run_memory(opts.dedupe_entries, entries, opts.rss_budget_s)
            entries = r.memory.entries
            console.print(
                f"(3) RSS {r.memory.rss_mb:.0f} MB (peak {r.memory.hwm_mb:.0f} MB) "
                f"with {entries:,} entries"
            )
        for how in ("SIGKILL", "SIGTERM"):
            console.print(f"(4) restart after {how} …")
            restart = bench.run_restart(how, entries, next_n)
            next_n += 1 + partitions
            entries += 1 + partitions
            r.restarts.append(restart)
            console.print(
                f"(4) first event {restart.first_s:.2f} s, every partition "
                f"{restart.all_partitions_s:.2f} s after the start"
            )
            if how == "SIGKILL" and r.memory is not None and bench.worker is not None:
                r.memory.after_restart_mb = group_rss_mb(bench.worker.pid)[0]
    except BaseException:
        for process in (bench.plain, bench.worker):
            if process is not None:
                console.print(f"[dim]{process.name} log tail:\n{process.log_tail(15)}[/]")
        raise
    finally:
        bench.stop_all()
    if (note := contention(r)) is not None:
        r.notes.append(note)
    r.notes.append(f"the processor benchmark took {time.monotonic() - began:.0f} s")
    print_report(r)
    return r


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@processor_options
@results_dir_option
def main(processors: ProcessorOptions, results_dir: Path) -> None:
    """Events/s of a plain faust agent vs onceonly's worker, RSS with many dedupe entries,
    and restart-to-first-event."""
    load_before = loadavg()
    code = revision()  # at the start: the processes run the code as it is now

    def body() -> tuple[Results, str]:
        with (
            tempfile.TemporaryDirectory(prefix="onceonly-bench-proc-") as tmp,
            kafka(Path(tmp)) as broker,
        ):
            return collect(processors, broker, Path(tmp)), broker.about

    results, kafka_about = execute(body)
    md, png = write_report(
        "processors",
        "Processor benchmark",
        [section(results)],
        about(kafka_about, load_before, code),
        command_line("bench.processors"),
        results_dir,
    )
    console.print(f"written to {md} and {png.name}")


if __name__ == "__main__":
    main()

"""The processor benchmark's phases, run one after the other on one broker."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import secrets
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from bench._proc_records import agentmail_records, produce, produce_on, stripe_records
from bench._proc_report import FILL_CHUNK, Drain, Memory, Restart, log_marks
from bench._proc_stack import (
    STALL_S,
    base_env,
    check_alive,
    get_json,
    group_rss_mb,
    kill_hard,
    poll,
    scrape,
    serve_mail,
    wait_progress,
)
from bench._procs import BenchError, Broker, CpuWindow, ServerProcess, console, create_topics

#: The same for a restart, which with a large table may take minutes.
RESTART_STALL_S = 900.0


NO_HANDLER = 'onceonly_skips_total{reason="no_handler"}'


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
    #: more workers than ``worker`` (the takeover's standby pair), stopped by stop_all
    extra: list[ServerProcess] = field(default_factory=list)

    @classmethod
    def fresh(
        cls, broker: Broker, work: Path, label: str, partitions: int, log_level: str = "INFO"
    ) -> Self:
        """A stack of its own on ``broker``: a tag, topics ``onceonly-bench-<label>-<tag>``,
        the folder ``<work>/<label>-<tag>``."""
        tag = secrets.token_hex(3)
        topics = create_topics(broker.bootstrap, partitions, f"onceonly-bench-{label}-{tag}")
        folder = work / f"{label}-{tag}"
        folder.mkdir()
        return cls(folder, broker.bootstrap, topics, tag, partitions, log_level, broker.pid)

    @property
    def deliveries(self) -> str:
        return self.topics["ONCEONLY_DELIVERIES_TOPIC"]

    def cpu_pids(self, name: str, pid: int) -> dict[str, int | None]:
        mail = {"mail": self.mail.pid} if self.mail is not None else {}
        broker = {"broker": self.broker_pid} if self.broker_pid is not None else {}
        return {name: pid, **mail, **broker, "bench": None}

    def run_plain(self, count: int) -> Drain:
        out = self.work / "plain.json"
        settings = {
            "bootstrap": self.bootstrap,
            "topic": self.deliveries,
            "app_id": f"onceonly-bench-{self.tag}-plain",
            "data_dir": str(self.work / "plain-data"),
            "partitions": self.partitions,
            "expect": count,
            "out": str(out),
            "loglevel": self.log_level.lower(),
        }
        argv = [sys.executable, "-m", "bench._plain_faust", json.dumps(settings)]
        log = self.work / "plain.log"
        self.plain = ServerProcess("plain faust agent", argv, base_env({}), log)
        started = time.time()
        self.plain.start()

        def read() -> int:
            try:
                return int(json.loads(out.read_text(encoding="utf-8"))["count"])
            except (OSError, ValueError):
                return 0

        cpu = self.drain(read, count, "agent", self.plain, "(1) draining", 0.02)
        data = json.loads(out.read_text(encoding="utf-8"))
        self.plain.stop()
        self.plain = None
        return Drain.timed(
            "(1) plain faust agent, counts only", count, data, started, cpu.percent, "agent"
        )

    def drain(
        self,
        read: Callable[[], int],
        count: int,
        name: str,
        process: ServerProcess,
        what: str,
        every_s: float,
    ) -> CpuWindow:
        """Wait for ``read()`` to reach ``count``; the CPU of ``process`` (as ``name``) and
        the others from its first count to the end."""
        cpu: CpuWindow | None = None

        def counted() -> int:
            nonlocal cpu
            value = read()
            if value and cpu is None:
                cpu = CpuWindow(self.cpu_pids(name, process.pid))
                cpu.begin()
            return value

        wait_progress(counted, count, what=what, process=process, every_s=every_s)
        assert cpu is not None
        cpu.end()
        return cpu

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
        self.worker, started = self.spawn_worker("onceonly worker")
        return started

    def spawn_worker(self, name: str, **env: str) -> tuple[ServerProcess, float]:
        """A started ``onceonly worker`` (:meth:`worker_env`, ``env`` on top), and the
        wall-clock time just before it was spawned."""
        self.starts += 1
        argv = [sys.executable, "-m", "onceonly", "worker"]
        log = self.work / f"worker-{self.starts}.log"
        process = ServerProcess(name, argv, {**self.worker_env(), **env}, log)
        started = time.time()
        process.start()
        return process, started

    def control(self, what: str, timeout_s: float = 10.0) -> Any:
        """The instant mail server's ``/_control/<what>`` (stats, received, counts, texts)."""
        try:
            return get_json(f"http://127.0.0.1:{self.mail_port}/_control/{what}", timeout_s)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise BenchError(f"the instant mail server did not answer: {exc}") from exc

    def mail_stats(self) -> dict[str, Any]:
        return self.control("stats")  # type: ignore[no-any-return]

    def received(self) -> dict[str, float]:
        """The mail server's replied-to Message-IDs and when each reply arrived."""
        return self.control("received")  # type: ignore[no-any-return]

    def sent(self) -> int:
        """Replies the mail server has received so far."""
        return int(self.mail_stats()["sent"])

    def start_mail(self) -> None:
        from devstack.ports import free_port

        self.worker_port = free_port()
        self.mail, self.mail_port = serve_mail(self.work / "mail.log")

    def worker_metric(self, name: str, timeout_s: float = 30.0, want: float | None = None) -> float:
        """A sample of the worker's /metrics; waits for it to reach ``want`` if given."""

        def reached(found: dict[str, float] | None) -> bool:
            return found is not None and (want is None or found.get(name, 0.0) >= want)

        found = poll(lambda: scrape(self.worker_port), reached, timeout_s, 0.2)
        return math.nan if found is None else found.get(name, 0.0)

    def run_replies(self, count: int) -> Drain:
        started = self.start_worker()
        assert self.worker is not None
        cpu = self.drain(self.sent, count, "worker", self.worker, "(2) replying", 0.05)
        return Drain.timed(
            "(2) onceonly worker: dedupe, reorder (window 0), reply",
            count,
            self.mail_stats(),
            started,
            cpu.percent,
        )

    def run_memory(self, target: int, held: int, budget_s: float, tag: str = "") -> Memory:
        """Produce ``target`` distinct Stripe events in batches while the running worker
        records them, within ``budget_s``; then read its RSS. ``held``: entries it had;
        ``tag`` keeps the events of a later call distinct from an earlier one's."""
        worker = self.worker
        assert worker is not None
        records = stripe_records(target, self.tag + tag)
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
                growth.append((held + done, group_rss_mb(worker.pid)[0]))
                _progress(done, produced, target, growth[-1][1], time.monotonic() - began)
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

    def run_restart(self, how: str, entries: int, next_n: int) -> Restart:
        worker = self.worker
        assert worker is not None
        before = self.sent()
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
            return self.sent() - before

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
        events = enumerate(agentmail_records(self.partitions, start=next_n + 1))
        produce_on(self.bootstrap, self.deliveries, events, "the per-partition events")
        wait_progress(
            lambda: self.sent() - before - 1,
            self.partitions,
            what=f"(4) one event per partition after {how}",
            process=worker,
            every_s=0.05,
            stall_s=RESTART_STALL_S,
        )
        restart.all_partitions_s = float(self.mail_stats()["last"]) - started
        return restart

    def processes(self) -> list[ServerProcess]:
        """Every process of the stack that was started."""
        return [p for p in (self.plain, self.worker, *self.extra, self.mail) if p is not None]

    def stop_all(self) -> None:
        for process in self.processes():
            with contextlib.suppress(Exception):
                process.stop(timeout_s=30)

    @contextlib.contextmanager
    def running(self) -> Iterator[Self]:
        """The stack for a run: on a failure, each process's log tail is printed; every
        process is stopped on the way out."""
        try:
            yield self
        except BaseException:
            for process in self.processes():
                console.print(f"[dim]{process.name} log tail:\n{process.log_tail(15)}[/]")
            raise
        finally:
            self.stop_all()


def _progress(done: int, produced: int, target: int, rss_mb: float, seconds: float) -> None:
    console.print(
        f"  (3) {done:,} recorded of {produced:,} produced ({target:,} wanted), "
        f"RSS {rss_mb:.0f} MB, {seconds:.0f} s"
    )

"""The stack of a chaos run: broker, mail server, ingest and workers, started and watched."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import click

from chaos.brokers import ChaosBroker, ClusterBroker, SingleBroker
from chaos.common import (
    APP_ID,
    DEAD_LETTER_TOPIC,
    DELIVERIES_TOPIC,
    LEDGER_TOPIC,
    PARTITIONS,
    PRODUCE_TIMEOUT_MS,
    ROOT,
    SEND_ATTEMPTS,
    ChaosError,
    indent,
    now,
)
from chaos.load import Load
from chaos.options import WRITER_SLOW, Options
from chaos.plan import Plan
from chaos.processes import Proc
from chaos.writer_log import WriterLog
from chaos.writers import WriterConfig
from devstack.ports import free_port
from testkit import signing

#: ONCEONLY_OPS_TOKEN of an approval run: the decider's bearer token
OPS_TOKEN = "chaos-ops-token"

# --------------------------------------------------------------------------- the run


@dataclass
class Snapshot:
    phase: str
    at_s: float
    emails: int
    quiet: bool


class Stack:
    """The processes of a chaos run, their environment, and the calls the run makes."""

    def __init__(self, opts: Options, run_dir: Path) -> None:
        self.opts = opts
        self.run_dir = run_dir
        self.rng = random.Random(opts.seed)
        self.started_wall = datetime.now(UTC)
        self.t_start = now()
        self.events_log = run_dir / "events.log"
        self.ingest_port = free_port()
        self.mail_port = free_port()
        self.mail_url = f"http://127.0.0.1:{self.mail_port}"
        self.broker: ChaosBroker = (
            SingleBroker(run_dir, self._broker_env(), run_dir / "broker.log")
            if opts.nodes == 1
            else ClusterBroker(run_dir, opts.nodes)
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
        self.load_span = (0.0, 0.0)  #: the load phase, s since the start
        self.injected = Counter[str]()
        self.snapshots: list[Snapshot] = []
        self.phases: list[tuple[str, float]] = []
        self.replayed: str = ""
        self.catch_ups: list[list[int]] = []  #: per inbox: found ... pending
        self.catch_up_wall = 0.0  #: when the catch-up began (epoch s)
        self.writer_log = WriterLog(run_dir / "writer-calls")
        self.pause_records: list[Any] = []  #: chaos.pauses.PauseRecord, in order
        self.paused: set[str] = set()  #: workers stopped now, or watched after a pause
        self._stop = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    # ---------------------------------------------------------------- helpers

    def elapsed(self) -> float:
        return now() - self.t_start

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
        if self.opts.approvals:  # the writer's Drafts wait; the decider decides (HTTP, CLI)
            env.update({"ONCEONLY_APPROVAL": "writer", "ONCEONLY_OPS_TOKEN": OPS_TOKEN})
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
        from onceonly.foundation.kafka import BrokerUnavailable, Connection, consumer_lag

        if self.broker_busy:
            return None
        try:
            rows = await asyncio.to_thread(
                consumer_lag, Connection(self.bootstrap), APP_ID, DELIVERIES_TOPIC, timeout_s=5.0
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
        nodes = "the broker" if self.broker.nodes == 1 else f"a {self.broker.nodes}-node cluster"
        self.event(f"starting {nodes} on {self.bootstrap}")
        await asyncio.to_thread(self.broker.start_and_wait)
        code, out = await self._cli("topics", "topics", timeout_s=120)
        if code != 0:
            raise ChaosError(f"onceonly topics failed (exit {code}):\n{out}")
        self.event("topics: " + await asyncio.to_thread(self._topic_shapes))

        await self._start_mail()
        assert self.plan is not None
        seeds = [m.seed() for m in self.plan.messages]
        for i in range(0, len(seeds), 1000):
            await self._mail("POST", "/_control/seed", {"messages": seeds[i : i + 1000]})
        ignored = (await self._mail("GET", "/_control/faults"))["ignore_keys"]
        if ignored != self.opts.keys_ignored:
            raise ChaosError(f"the fake AgentMail's ignore_keys is {ignored}, not as asked")
        self.event(
            f"fake AgentMail at {self.mail_url}, seeded with {len(seeds)} messages, "
            f"Idempotency-Key {'IGNORED' if ignored else 'honoured'}"
        )

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
        await self.ingest.wait_ready(f"http://127.0.0.1:{self.ingest_port}/readyz", 60.0)
        self.event(f"ingest at http://127.0.0.1:{self.ingest_port}/webhooks/agentmail")

        self.workers = [self._worker(i).start() for i in range(1, self.opts.workers + 1)]
        await self._wait_workers_ready()
        self.event(
            f"{len(self.workers)} workers ready "
            f"(window {self.opts.window_ms} ms, send timeout {self.opts.send_timeout_s:g} s, "
            f"{SEND_ATTEMPTS} send attempts)"
        )

    async def _start_mail(self) -> None:
        """The fake AgentMail API, honouring or ignoring idempotency keys as asked."""
        keys = ["--ignore-idempotency-keys"] if self.opts.keys_ignored else []
        server = [sys.executable, "-m", "testkit.fakes.agentmail_server"]
        self.mail = Proc(
            "agentmail",
            [*server, "--port", str(self.mail_port), *keys],
            self._clean_env(),
            self.run_dir / "agentmail.log",
        ).start()
        await self.mail.wait_ready(self.mail_url + "/_control/health", 60.0)

    def _topic_shapes(self) -> str:
        """The replicas and min.insync.replicas of onceonly's topics; on a cluster, refuse
        to go on unless each has 3 replicas and 2 in sync to write (onceonly's default on
        3 brokers or more)."""
        from onceonly.foundation.kafka import Admin, Connection

        admin = Admin(Connection(self.bootstrap))
        names = [DELIVERIES_TOPIC, LEDGER_TOPIC, DEAD_LETTER_TOPIC]
        shapes = admin.topic_shapes()
        configs = admin.topic_configs(names)
        seen = {n: (shapes[n][1], configs[n].get("min.insync.replicas", "?")) for n in names}
        text = ", ".join(f"{n} {r} replicas, min.insync.replicas {m}" for n, (r, m) in seen.items())
        if self.broker.nodes >= 3 and any(shape != (3, "2") for shape in seen.values()):
            raise ChaosError(f"a cluster's topics should have 3 replicas, 2 in sync: {text}")
        return text

    def _worker(self, i: int) -> Proc:
        """Worker ``w<i>``: its own data dir, port and static member id."""
        data = self.run_dir / "workers" / f"w{i}"
        data.mkdir(parents=True, exist_ok=True)
        return Proc(
            f"w{i}",
            [sys.executable, "-m", "onceonly", "worker"],
            self.env(
                ONCEONLY_DATA_DIR=str(data),
                ONCEONLY_RUN_DIR=str(data / "run"),
                ONCEONLY_WORKER_PORT=str(free_port()),
                ONCEONLY_WORKER_ID=f"chaos-w{i}",
                ONCEONLY_SEND_ATTEMPTS=str(SEND_ATTEMPTS),
                ONCEONLY_SEND_TIMEOUT_S=f"{self.opts.send_timeout_s:g}",
                **self._writer_env(),
            ),
            self.run_dir / f"worker-w{i}.log",
        )

    def _writer_env(self) -> dict[str, str]:
        """The slow chaos writer (chaos/writers.py), logging to the run directory."""
        if self.opts.writer != WRITER_SLOW:
            return {}
        config = WriterConfig(
            seconds=self.opts.writer_s,
            long_seconds=self.opts.writer_long_s,
            long_share=self.opts.writer_long_share,
            log_dir=self.writer_log.directory,
            approval_share=self.opts.approvals,
            approval_seed=self.opts.seed,
        )
        return {
            "ONCEONLY_REPLY_WRITER": "chaos.writers:slow",
            "ONCEONLY_WRITER_CONCURRENCY": str(self.opts.writer_concurrency),
            **config.env(),
        }

    async def _wait_workers_ready(self, timeout_s: float = 120.0) -> None:
        deadline = now() + timeout_s
        while True:
            ready = [w for w in self.workers if "worker ready" in w.log()]
            for w in self.workers:
                if not w.alive:
                    raise ChaosError(f"worker {w.name} exited during start-up:\n{w.log_tail()}")
            if len(ready) == len(self.workers):
                return
            if now() > deadline:
                raise ChaosError(f"workers not ready within {timeout_s:g} s")
            await asyncio.sleep(0.5)

    def worker_urls(self) -> list[str]:
        """The web ports (``/approvals``) of the workers running now."""
        ports = [w.env["ONCEONLY_WORKER_PORT"] for w in self.workers if w.alive]
        return [f"http://127.0.0.1:{port}" for port in ports]

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
                        + indent(worker.log_tail(8))
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

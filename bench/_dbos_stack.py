"""The DBOS comparison's moving parts: the envelopes, the open-loop feeder, the two contenders
(onceonly's worker, the DBOS app), and one contender's run with its SIGKILL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import _dbos_figures as fig
from bench._agent_load import AgentBench
from bench._model import CALLS_ENV
from bench._once import PerMessage
from bench._proc_records import Record
from bench._proc_stack import base_env, kill_hard, tree_memory_mb
from bench._procs import ROOT, BenchError, CpuWindow, ServerProcess, console

#: The DBOS app's interpreter: its own virtual environment (``make bench-dbos`` makes it).
DBOS_PYTHON = ROOT / ".venv-dbos" / "bin" / "python"
#: Seconds the steady run waits after its load for the last replies; the kill run more.
TAIL_S, KILL_TAIL_S = 90.0, 300.0
#: A restart may wait out the killed consumer's session (librdkafka: 45 s): no stall alarm
#: before that.
KILL_STALL_S = 150.0

Message = tuple[str, Record]  #: (Message-ID, the record ingest would produce)


class Feeder(threading.Thread):
    """Produce ``messages`` at ``rate``/s by the clock (open loop), acks=all; ``acked``:
    when the broker acknowledged each one (epoch seconds)."""

    def __init__(self, bootstrap: str, topic: str, messages: list[Message], rate: float) -> None:
        super().__init__(name="feeder", daemon=True)
        self.bootstrap, self.topic, self.messages, self.rate = bootstrap, topic, messages, rate
        self.acked: dict[str, float] = {}
        self.failed: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 2, "log_level": 3}
        )

        def done(message_id: str) -> Callable[[object, object], None]:
            def on_delivery(err: object, msg: object) -> None:
                if err is None:
                    self.acked[message_id] = time.time()
                else:
                    self.failed.append(f"{message_id}: {err}")

            return on_delivery

        start = time.perf_counter()
        for i, (message_id, (key, value, headers)) in enumerate(self.messages):
            due = start + i / self.rate
            while (delay := due - time.perf_counter()) > 0:  # poll returns at any event
                producer.poll(delay)
            producer.produce(
                self.topic, value, key=key, headers=headers, on_delivery=done(message_id)
            )
            producer.poll(0)
        if producer.flush(60):
            self.failed.append("records left unacknowledged after 60 s")


@dataclass
class Contender:
    """One system under test: how to start it, and which processes are its own."""

    label: str
    bench: AgentBench
    start: Callable[[Contender], None]  #: starts it and sets ``bench.worker``
    #: its own processes other than the worker/app, by name (PostgreSQL for DBOS)
    extra_pids: dict[str, int] = field(default_factory=dict)
    name: str = "worker"  #: the worker's or the app's name in the figures
    starts: int = 0

    @property
    def calls_file(self) -> Path:
        return self.bench.work / "model-calls.txt"

    def cpu(self) -> CpuWindow:
        assert self.bench.worker is not None
        pids = self.bench.cpu_pids(self.name, self.bench.worker.pid) | self.extra_pids
        return CpuWindow(pids, trees=frozenset(self.extra_pids))

    def own(self) -> list[str]:
        """The processes whose CPU is the system's: its worker or app, its database, the broker."""
        return [self.name, *self.extra_pids, *(["broker"] if self.bench.broker_pid else [])]

    def memory(self) -> dict[str, float]:
        assert self.bench.worker is not None
        pids = {self.name: self.bench.worker.pid} | self.extra_pids
        return {
            name: tree_memory_mb(pid, "smaps_rollup", ("Pss",))[0] for name, pid in pids.items()
        }


def start_onceonly(c: Contender) -> None:
    c.starts += 1
    c.bench.start_worker()


def dbos_starter(database_url: str, group: str) -> Callable[[Contender], None]:
    """Starts the DBOS app (``bench.dbos_app``) from ``.venv-dbos``."""

    def start(c: Contender) -> None:
        if not DBOS_PYTHON.exists():
            raise BenchError(f"{DBOS_PYTHON} is missing: `make bench-dbos` creates .venv-dbos")
        c.starts += 1
        b = c.bench
        argv = [str(DBOS_PYTHON), "-m", "bench.dbos_app", "--bootstrap", b.bootstrap]
        argv += ["--topic", b.deliveries, "--group", group, "--database-url", database_url]
        argv += ["--mail-url", f"http://127.0.0.1:{b.mail_port}", "--log-level", b.log_level]
        env = base_env({CALLS_ENV: str(c.calls_file)})
        b.worker = ServerProcess("DBOS app", argv, env, b.work / f"dbos-{c.starts}.log")
        b.worker.start()

    return start


def _feed(c: Contender, messages: list[Message], rate: float) -> Feeder:
    feeder = Feeder(c.bench.bootstrap, c.bench.deliveries, messages, rate)
    feeder.start()
    return feeder


def warm_up(c: Contender, messages: list[Message]) -> None:
    """A few replies before the measured load: the consumer has joined, the schema is made."""
    feeder = _feed(c, messages, rate=20.0)
    feeder.join()
    ids = {m for m, _ in messages}
    c.bench.wait_answered(ids, timeout_s=180, stall_s=180)
    missing = ids - c.bench.received().keys()
    if missing or feeder.failed:
        raise BenchError(
            f"({c.label}) warm-up: {len(missing)} of {len(ids)} never answered, produce "
            f"failures {feeder.failed[:3]}; its log:\n"
            + (c.bench.worker.log_tail(20) if c.bench.worker else "")
        )


def steady(c: Contender, messages: list[Message], rate: float, run: fig.SystemRun) -> None:
    """The steady run: replies/s, latency from the broker's ack to the email, CPU, memory."""
    cpu = c.cpu()
    began = time.perf_counter()
    cpu.begin()
    feeder = _feed(c, messages, rate)
    feeder.join()
    c.bench.wait_answered({m for m, _ in messages}, timeout_s=TAIL_S)
    run.memory_mb = c.memory()
    cpu.end()
    elapsed = time.perf_counter() - began
    run.cpu_s = {name: cpu.percent[name] / 100 * elapsed for name in c.own()}
    run.produced = dict(feeder.acked)
    ids = set(run.produced)
    run.received = {m: t for m, t in c.bench.received().items() if m in ids}
    others = {k: v for k, v in cpu.percent.items() if k not in c.own()}
    run.other_cpu = others.get("other", 0.0)
    run.notes.append(
        "CPU of the other processes over the steady run, % of one core: "
        + ", ".join(f"{k} {v:.0f}" for k, v in others.items())
    )


def kill_run(
    c: Contender, messages: list[Message], rate: float, run: fig.SystemRun
) -> tuple[int, float]:
    """The same load with a SIGKILL halfway and an immediate restart; returns the killed
    pid and the wall-clock time of the restart."""
    feeder = _feed(c, messages, rate)
    time.sleep(len(messages) / rate / 2)
    assert c.bench.worker is not None
    killed = c.bench.worker.pid
    kill_hard(c.bench.worker)
    restarted = time.time()
    c.start(c)
    console.print(f"({c.label}) SIGKILLed pid {killed} mid-run, started again")
    feeder.join()
    ids = {m for m, _ in messages}
    c.bench.wait_answered(ids, timeout_s=KILL_TAIL_S, stall_s=KILL_STALL_S)
    run.kill_messages = [m for m, _ in messages]
    return killed, restarted


def count(
    c: Contender, everything: list[str], killed: int, restarted: float, run: fig.SystemRun
) -> None:
    """Emails, sends and model calls per message; the first reply after the restart."""
    counts: dict[str, list[int]] = c.bench.control("counts")
    calls = fig.parse_calls(c.calls_file.read_text(encoding="utf-8"))
    run.emails = PerMessage.mailed(everything, counts)
    run.sends = PerMessage.mailed(everything, counts, sends=True)
    run.calls = PerMessage.of(run.kill_messages, fig.starts(calls))
    run.in_flight_at_kill = fig.in_flight(calls, killed)
    received = c.bench.received()
    after = [t for t in received.values() if t > restarted]
    run.first_reply_after_restart_s = min(after) - restarted if after else float("nan")
    run.unanswered_after_kill = sum(1 for m in run.kill_messages if m not in received)
    steady_calls = PerMessage.of(run.produced, fig.starts(calls))
    if steady_calls.most != 1 or steady_calls.none:
        run.notes.append(f"model calls per message in the steady run: {steady_calls.describe()}")

"""``ONCEONLY_INGEST_PROCESSES=N``: N ingest processes on one port, under one parent.

One ingest process is one event loop, so one core. With N, the parent reserves the port
(a socket bound with SO_REUSEPORT that never listens, so it takes no connection), then
starts N children (``onceonly ingest --one-of <dir>``), each a whole ingest with its own
producer, listening on that port with SO_REUSEPORT: the kernel spreads new connections
over them. The parent watches them (a child that dies is started again, at most once per
``restart_every_s`` per slot), and on SIGINT or SIGTERM stops them all: SIGTERM, then
SIGKILL after ``grace_s``. Each child answers 204 only after the broker's ack, as one
process does; a delivery in flight in a child that dies was not answered 2xx, so its
sender retries it.

Metrics: the children write prometheus_client's multiprocess files under ``<dir>/metrics``,
and each child's ``/metrics`` sums all of them, so a scrape of the port sees the whole
ingest whichever child answers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from onceonly.foundation.settings import Settings

log = structlog.get_logger("onceonly.ingest")

READY_PREFIX = "ready."


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT, not listening: the port is ours
    (port 0 picks a free one) and every child can bind it too."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def restart_due(last_start: float, now: float, every_s: float) -> bool:
    """A dead child is started again once ``every_s`` has passed since its last start."""
    return now - last_start >= every_s


def mark_ready(state_dir: Path) -> None:
    """Called by a child once it listens: the parent counts these files."""
    (state_dir / f"{READY_PREFIX}{os.getpid()}").touch()


def ready_pids(state_dir: Path) -> set[int]:
    return {
        int(p.name[len(READY_PREFIX) :])
        for p in state_dir.glob(f"{READY_PREFIX}*")
        if p.name[len(READY_PREFIX) :].isdigit()
    }


def started(pids: set[int], dead: set[int], ready: set[int]) -> bool | None:
    """Whether the children have started: True once every one has listened (one that died
    after that is restarted like any other), False if one died before it listened, None
    while some are still starting."""
    if pids <= ready:
        return True
    if dead - ready:
        return False
    return None


@dataclass
class Slot:
    process: subprocess.Popen[bytes]
    started: float
    restarts: int = 0


@dataclass
class IngestProcesses:
    """The parent: start N children on one port, keep them running, stop them together."""

    settings: Settings
    count: int
    command: Sequence[str] = (sys.executable, "-m", "onceonly", "ingest")
    restart_every_s: float = 1.0
    grace_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    slots: list[Slot] = field(default_factory=list)
    port: int = 0

    @property
    def state_dir(self) -> Path:
        return self.settings.run_dir / "ingest"

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "ONCEONLY_INGEST_PORT": str(self.port),
            "ONCEONLY_INGEST_PROCESSES": "1",
            # read by prometheus_client at import: counters and histograms in shared files
            "PROMETHEUS_MULTIPROC_DIR": str(self.state_dir / "metrics"),
        }
        return subprocess.Popen([*self.command, "--one-of", str(self.state_dir)], env=env)

    def start(self, reserved: socket.socket) -> None:
        self.port = reserved.getsockname()[1]
        shutil.rmtree(self.state_dir, ignore_errors=True)
        (self.state_dir / "metrics").mkdir(parents=True)
        self.slots = [Slot(self._spawn(), self.clock()) for _ in range(self.count)]
        log.info(
            "ingest processes started",
            count=self.count,
            port=self.port,
            pids=[s.process.pid for s in self.slots],
        )

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """True once every child listens; False if one died first or the time ran out."""
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            pids = {s.process.pid for s in self.slots}
            dead = {s.process.pid for s in self.slots if s.process.poll() is not None}
            verdict = started(pids, dead, ready_pids(self.state_dir))
            if verdict is not None:
                return verdict
            time.sleep(0.1)
        return False

    def check(self) -> None:
        """Start again each child that has exited, once its slot's restart is due."""
        for n, slot in enumerate(self.slots):
            code = slot.process.poll()
            if code is None or not restart_due(slot.started, self.clock(), self.restart_every_s):
                continue
            log.warning(
                "ingest process exited; starting it again",
                slot=n,
                pid=slot.process.pid,
                exit_code=code,
                restarts=slot.restarts + 1,
            )
            self.slots[n] = Slot(self._spawn(), self.clock(), slot.restarts + 1)

    def stop(self) -> None:
        """SIGTERM to every child, SIGKILL to those still running after ``grace_s``."""
        for slot in self.slots:
            if slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)
        deadline = self.clock() + self.grace_s
        for slot in self.slots:
            try:
                slot.process.wait(max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                slot.process.kill()
                slot.process.wait()
        log.info("ingest processes stopped", count=len(self.slots))


def run_processes(
    settings: Settings, *, ready: Callable[[str], None] | None = None, poll_s: float = 0.5
) -> int:
    """``onceonly ingest`` with ``ONCEONLY_INGEST_PROCESSES`` > 1, until SIGINT or SIGTERM."""
    stopping = threading.Event()
    previous = {
        s: signal.signal(s, lambda *_: stopping.set()) for s in (signal.SIGINT, signal.SIGTERM)
    }
    group = IngestProcesses(settings, settings.ingest_processes)
    try:
        with contextlib.closing(reserve_port(settings.ingest_host, settings.ingest_port)) as sock:
            group.start(sock)
            if not group.wait_ready() and not stopping.is_set():
                log.error("an ingest process did not start; see its log above")
                return 1
            if ready is not None:
                ready(f"http://{settings.ingest_host}:{group.port}")
            while not stopping.wait(poll_s):
                group.check()
        return 0
    finally:
        group.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)

"""``onceonly up``: the local stack around ingest (a broker if local, the topics, a worker)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol

from devstack.broker import EmbeddedBroker
from foundation.kafka import Admin, client_security
from foundation.settings import Settings
from foundation.topics import topic_specs

Echo = Callable[[str], Any]


def port_of(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


@contextlib.contextmanager
def local_stack(settings: Settings, echo: Echo) -> Iterator[None]:
    """A broker (if the bootstrap is local and nothing answers), the topics, one worker."""
    with contextlib.ExitStack() as stack:
        admin = Admin(settings.kafka_bootstrap, security=client_security(settings))
        if settings.is_local_broker and not admin.ping(2.0):
            stack.enter_context(local_broker(settings, echo))
        for status in admin.ensure_topics(topic_specs(settings)):
            echo(f"topic {status.name}: {status.partitions} partitions, {status.replicas} replicas")
        stack.enter_context(worker_process(echo))
        yield


@contextlib.contextmanager
def local_broker(settings: Settings, echo: Echo) -> Iterator[None]:
    broker = EmbeddedBroker(
        settings.run_dir.resolve(),
        port=port_of(settings.kafka_bootstrap),
        heap_mb=settings.broker_heap_mb,
    )
    echo(f"starting kafka at {broker.bootstrap} (data in {settings.run_dir}/broker)")
    broker.start()
    try:
        yield
    finally:
        echo("stopping kafka")
        broker.stop()


@contextlib.contextmanager
def worker_process(echo: Echo) -> Iterator[None]:
    """``onceonly worker`` beside ingest, with the same environment; stopped on exit."""
    worker = subprocess.Popen([sys.executable, "-m", "onceonly", "worker"])
    echo(f"worker started (pid {worker.pid})")
    try:
        yield
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()


def run_until_signal(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine until SIGINT or SIGTERM, then cancel it and let it clean up."""

    async def runner() -> None:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(runner())


class ForegroundBroker(Protocol):
    """An :class:`EmbeddedBroker` or a :class:`devstack.cluster.LocalCluster`."""

    @property
    def log_path(self) -> Path: ...
    def start(self) -> str: ...
    def stop(self, timeout_s: float = 30.0) -> None: ...
    def is_running(self) -> bool: ...


def single_broker(run_dir: Path, port: int, heap_mb: int) -> EmbeddedBroker:
    return EmbeddedBroker(run_dir, port=port, heap_mb=heap_mb)


def run_foreground(broker: ForegroundBroker) -> int:
    """``onceonly broker``: run a broker (or a cluster) until SIGINT or SIGTERM, then stop
    it cleanly. Returns 0 after a requested stop, 1 if a broker died on its own."""
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {
        signum: signal.signal(signum, _request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        bootstrap = broker.start()
        print(f"kafka broker ready at {bootstrap}", flush=True)
        while not stop_requested.wait(timeout=1.0):
            if not broker.is_running():
                print(
                    f"kafka broker at {bootstrap} exited on its own; see {broker.log_path}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
        print("stopping kafka broker...", file=sys.stderr, flush=True)
        return 0
    finally:
        broker.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

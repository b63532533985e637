"""``python -m devstack up``: the local stack around ingest (a broker if local, the topics, a
worker)."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from devstack.broker import EmbeddedBroker
from devstack.children import Stopping, stop_child
from onceonly.foundation.kafka import Admin, Connection
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs

Echo = Callable[[str], Any]


def port_of(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


#: Ctrl-C stops the whole local stack (ingest, worker, broker) within this many seconds
STOP_BUDGET_S = 9.0
#: of which this is kept for the broker's clean stop, after the worker's (about 1 s)
BROKER_STOP_S = 2.5
#: the worker's ONCEONLY_DRAIN_GRACE_S here unless set: work running at Ctrl-C gets this long,
#: then what finished is committed and the rest read again at the next start, within the
#: worker's share of the budget (its default, 10 s, would outlast it)
WORKER_DRAIN_GRACE_S = "3"


@contextlib.contextmanager
def local_stack(settings: Settings, echo: Echo, stopping: Stopping) -> Iterator[None]:
    """A broker (if the bootstrap is local and nothing answers), the topics, one worker;
    stopped within ``stopping``'s budget (the worker first, then the broker)."""
    with contextlib.ExitStack() as stack:
        # is a broker there already? A refused connect is an answer here, not a warning: the
        # probe's client logs nothing (librdkafka's queued lines would surface later, as a
        # "waiting for the broker" warning long after the broker came up)
        probe = Admin(Connection.from_settings(settings), log_level=0)
        if settings.is_local_broker and not probe.ping(2.0):
            stack.enter_context(local_broker(settings, echo, stopping))
        admin = Admin(Connection.from_settings(settings))
        for status in admin.ensure_topics(topic_specs(settings)):
            echo(f"topic {status.name}: {status.partitions} partitions, {status.replicas} replicas")
        stack.enter_context(worker_process(echo, stopping))
        yield


@contextlib.contextmanager
def local_broker(settings: Settings, echo: Echo, stopping: Stopping) -> Iterator[None]:
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
        broker.stop(timeout_s=stopping.left())


@contextlib.contextmanager
def worker_process(echo: Echo, stopping: Stopping) -> Iterator[None]:
    """``onceonly worker`` beside ingest, with the same environment; stopped on exit (asked at
    the stop's start, killed when only the broker's share of the budget is left)."""
    env = {"ONCEONLY_DRAIN_GRACE_S": WORKER_DRAIN_GRACE_S, **os.environ}
    worker = subprocess.Popen([sys.executable, "-m", "onceonly", "worker"], env=env)
    stopping.add(worker)
    echo(f"worker started (pid {worker.pid})")
    try:
        yield
    finally:
        stopping.begin()
        if stop_child(worker, timeout_s=stopping.left(keep_s=BROKER_STOP_S)):
            echo(
                f"worker did not stop within {STOP_BUDGET_S - BROKER_STOP_S:g} s of Ctrl-C: "
                "killed (what it had not finished is read again at its next start)"
            )


class ForegroundBroker(Protocol):
    """An :class:`EmbeddedBroker` or a :class:`devstack.cluster.LocalCluster`."""

    @property
    def log_path(self) -> Path: ...
    def start(self) -> str: ...
    def stop(self, timeout_s: float = 30.0) -> None: ...
    def is_running(self) -> bool: ...


def single_broker(run_dir: Path, port: int, heap_mb: int) -> EmbeddedBroker:
    return EmbeddedBroker(run_dir, port=port, heap_mb=heap_mb)


# --------------------------------------------------------------------------- a cluster's nodes

#: a node that died is started again this many seconds later (``--restart-delay``): by then
#: the controller has fenced it (broker.session.timeout.ms, 6 s) and led its partitions
#: elsewhere, so the failure shows before the node is back
RESTART_DELAY_S = 10.0
#: one node is restarted at most MAX_RESTARTS times within RESTART_WINDOW_S
MAX_RESTARTS = 3
RESTART_WINDOW_S = 600.0


class SupervisedNode(Protocol):
    """A :class:`devstack.cluster.ClusterNode`, as the supervisor sees it."""

    @property
    def node_id(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def bootstrap(self) -> str: ...
    @property
    def broker_dir(self) -> Path: ...
    @property
    def log_path(self) -> Path: ...
    def is_running(self) -> bool: ...
    def start(self) -> str: ...


class SupervisedCluster(Protocol):
    """A :class:`devstack.cluster.LocalCluster`, as the supervisor sees it."""

    @property
    def nodes(self) -> Sequence[SupervisedNode]: ...
    @property
    def log_path(self) -> Path: ...
    def start(self) -> str: ...
    def stop(self, timeout_s: float = 30.0) -> None: ...


def exit_status(code: int | None) -> str:
    """How a JVM ended, as Popen tells it: ``exit code 1``, ``exit code -9 (killed by SIGKILL)``."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
    return f"exit code {code}"


def _stdout(line: str) -> None:
    print(line, flush=True)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class _Watch:
    """What the supervisor knows of one node."""

    restarts: collections.deque[float] = field(default_factory=collections.deque)
    due: float | None = None  #: when the node, down and reported, is to be started again
    thread: threading.Thread | None = None  #: a restart under way
    failure: str | None = None  #: why that restart failed
    given_up: bool = False  #: down for good, until a restart is requested


class ClusterSupervisor:
    """Runs a local cluster for ``python -m devstack broker --nodes N`` and keeps its nodes up.

    A node whose JVM exits on its own (a crash, ``kill -9``) is reported on stderr with its
    node id, pid, exit code and log, while the other nodes keep serving. It is started again
    on its own data directory ``restart_delay_s`` later (``--restart-delay``,
    :data:`RESTART_DELAY_S`), or at once on SIGUSR1 (:meth:`restart_now`). The restart rate
    is bounded: at most ``max_restarts`` (3) restarts of one node within ``window_s``
    (10 minutes), failed starts included; a node that would need more stays down, reported,
    until SIGUSR1 renews its budget. A restart runs in a thread of its own, so that other
    deaths and a stop are seen meanwhile; :meth:`stop` stops every node, one being restarted
    included. Only :meth:`check` and :meth:`restart_now` report, from the caller's thread.
    """

    def __init__(
        self,
        cluster: SupervisedCluster,
        *,
        restart_delay_s: float = RESTART_DELAY_S,
        max_restarts: int = MAX_RESTARTS,
        window_s: float = RESTART_WINDOW_S,
        say: Echo = _stdout,
        warn: Echo = _stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.restart_delay_s = restart_delay_s
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._say = say
        self._warn = warn
        self._clock = clock
        self._stopping = threading.Event()
        self._watches = {node.node_id: _Watch() for node in cluster.nodes}

    @property
    def log_path(self) -> Path:
        return self.cluster.log_path

    def start(self) -> str:
        """Start every node; say where each listens, its pid and its data."""
        bootstrap = self.cluster.start()
        for node in self.cluster.nodes:
            self._say(
                f"kafka node {node.node_id} at {node.bootstrap} (pid {node.pid}), "
                f"data in {node.broker_dir}"
            )
        return bootstrap

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every node, a restart under way included, and start none again."""
        self._stopping.set()
        self.cluster.stop(timeout_s)
        for watch in self._watches.values():
            if watch.thread is not None:
                watch.thread.join()
        self.cluster.stop(timeout_s)  # a restart that began after the first stop

    def check(self) -> bool:
        """Report the nodes that died, came back or failed to start since the last check;
        begin the restarts that are due. False once no node runs and none will start."""
        now = self._clock()
        for node in self.cluster.nodes:
            self._check(node, self._watches[node.node_id], now)
        return any(
            node.is_running() or watch.thread is not None or watch.due is not None
            for node, watch in self._pairs()
        )

    def restart_now(self) -> list[int]:
        """SIGUSR1: start the nodes that are down now, those given up on included, with a
        renewed restart budget; the ids of those nodes."""
        self.check()
        now = self._clock()
        down = [
            (node, watch)
            for node, watch in self._pairs()
            if not node.is_running() and watch.thread is None
        ]
        for _node, watch in down:
            watch.given_up = False
            watch.restarts.clear()
            watch.due = now
        ids = [node.node_id for node, _ in down]
        what = ", ".join(map(str, ids)) if ids else "none (every node runs)"
        self._say(f"restart requested: kafka nodes down: {what}")
        self.check()
        return ids

    def _pairs(self) -> list[tuple[SupervisedNode, _Watch]]:
        return [(node, self._watches[node.node_id]) for node in self.cluster.nodes]

    def _check(self, node: SupervisedNode, watch: _Watch, now: float) -> None:
        if watch.thread is not None:
            if watch.thread.is_alive():
                return
            watch.thread = None
            failure, watch.failure = watch.failure, None
            if failure is not None:
                self._warn(f"kafka node {node.node_id} did not start again: {failure}")
                self._schedule(node, watch, now, f"kafka node {node.node_id} is still down")
                return
            self._say(
                f"kafka node {node.node_id} is back at {node.bootstrap} (pid {node.pid}), "
                f"on its data in {node.broker_dir}"
            )
        if node.is_running() or watch.given_up:
            return
        if watch.due is None:
            died = (
                f"kafka node {node.node_id} (pid {node.pid}) exited on its own, "
                f"{exit_status(node.exit_code)}; see {node.log_path}"
            )
            self._schedule(node, watch, now, died)
        elif now >= watch.due:
            self._begin_restart(node, watch, now)

    def _schedule(self, node: SupervisedNode, watch: _Watch, now: float, what: str) -> None:
        while watch.restarts and watch.restarts[0] <= now - self.window_s:
            watch.restarts.popleft()
        done = len(watch.restarts)
        nodes = self.cluster.nodes
        what += f"; {sum(n.is_running() for n in nodes)} of {len(nodes)} nodes run"
        if done >= self.max_restarts:
            watch.given_up, watch.due = True, None
            self._warn(
                f"{what}; it stays down, restarted {done} times within {self.window_s:g} s "
                f"already (`kill -USR1 {os.getpid()}` starts it again)"
            )
            return
        watch.due = now + self.restart_delay_s
        self._warn(
            f"{what}; restarting it on its data in {self.restart_delay_s:g} s (restart "
            f"{done + 1} of at most {self.max_restarts} within {self.window_s:g} s; "
            f"`kill -USR1 {os.getpid()}` restarts it now)"
        )

    def _begin_restart(self, node: SupervisedNode, watch: _Watch, now: float) -> None:
        watch.due = None
        watch.restarts.append(now)
        self._say(f"restarting kafka node {node.node_id} on its data in {node.broker_dir}")
        watch.thread = threading.Thread(
            target=self._restart,
            args=(node, watch),
            name=f"restart-kafka-node-{node.node_id}",
            daemon=True,
        )
        watch.thread.start()

    def _restart(self, node: SupervisedNode, watch: _Watch) -> None:
        if self._stopping.is_set():
            watch.failure = "the supervisor is stopping"
            return
        try:
            node.start()
        except Exception as exc:  # reported by check(), from the caller's thread
            watch.failure = str(exc) or type(exc).__name__


def run_foreground(broker: ForegroundBroker | ClusterSupervisor) -> int:
    """``python -m devstack broker``: run a broker (or a supervised cluster) until SIGINT or
    SIGTERM,
    then stop it cleanly. Returns 0 after a requested stop, 1 if the broker died on its own
    (a cluster: once every node is down and none will be restarted). A cluster's node that
    dies is reported and restarted (:class:`ClusterSupervisor`); SIGUSR1 restarts those down."""
    stop_requested = threading.Event()
    restart_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    def _request_restart(signum: int, frame: object) -> None:
        restart_requested.set()

    def _alive() -> bool:
        if not isinstance(broker, ClusterSupervisor):
            return broker.is_running()
        if restart_requested.is_set():
            restart_requested.clear()
            broker.restart_now()
        return broker.check()

    signals = [signal.SIGINT, signal.SIGTERM]
    previous = {signum: signal.signal(signum, _request_stop) for signum in signals}
    if isinstance(broker, ClusterSupervisor):
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, _request_restart)
    try:
        bootstrap = broker.start()
        print(f"kafka broker ready at {bootstrap}", flush=True)
        while not stop_requested.wait(timeout=1.0):
            if not _alive():
                what = (
                    "is down: no node runs and none will be restarted"
                    if isinstance(broker, ClusterSupervisor)
                    else "exited on its own"
                )
                print(
                    f"kafka broker at {bootstrap} {what}; see {broker.log_path}",
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

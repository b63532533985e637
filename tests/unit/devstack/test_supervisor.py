"""The supervisor of ``python -m devstack broker --nodes N``: a node that dies is reported and
restarted on its data, at a bounded rate, while the others keep running."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devstack.cluster import ClusterNode
from devstack.exceptions import BrokerError
from devstack.up import ClusterSupervisor, exit_status


class FakeNode:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.pid: int | None = 1000 + node_id
        self.exit_code: int | None = None
        self.running = False
        self.starts = 0
        self.failures: list[str] = []  #: the next starts fail with these
        self.before_start: Callable[[], None] = lambda: None
        self.bootstrap = f"127.0.0.1:{39091 + node_id}"
        self.broker_dir = Path(f"/run/broker-{node_id}")
        self.log_path = self.broker_dir / "logs" / "server.log"

    def is_running(self) -> bool:
        return self.running

    def start(self) -> str:
        self.before_start()
        self.starts += 1
        if self.failures:
            self.pid, self.exit_code = None, None
            raise BrokerError(self.failures.pop(0))
        self.pid, self.exit_code, self.running = 2000 + 10 * self.node_id + self.starts, None, True
        return self.bootstrap

    def die(self, code: int = -9) -> None:
        self.running, self.exit_code = False, code


class FakeCluster:
    def __init__(self, count: int = 3) -> None:
        self.nodes = [FakeNode(n) for n in range(1, count + 1)]
        self.log_path = Path("/run/broker-*/logs/server.log")
        self.stops = 0
        self.stopped = threading.Event()

    def start(self) -> str:
        return ",".join(node.start() for node in self.nodes)

    def stop(self, timeout_s: float = 30.0) -> None:
        self.stops += 1
        for node in self.nodes:
            node.running = False
        self.stopped.set()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    def __init__(self, **options: float) -> None:
        self.cluster = FakeCluster()
        self.clock = Clock()
        self.said: list[str] = []
        self.warned: list[str] = []
        self.supervisor = ClusterSupervisor(
            self.cluster,
            say=self.said.append,
            warn=self.warned.append,
            clock=self.clock,
            **options,  # type: ignore[arg-type]
        )
        self.supervisor.start()

    def node(self, node_id: int) -> FakeNode:
        return self.cluster.nodes[node_id - 1]

    def settle(self) -> bool:
        """check() until no restart is under way (a restart runs in a thread)."""
        deadline = time.monotonic() + 5
        while True:
            alive = self.supervisor.check()
            if not any(w.thread for w in self.supervisor._watches.values()):
                return alive
            assert time.monotonic() < deadline, "a restart did not finish"
            time.sleep(0.01)


def test_start_says_where_each_node_listens_and_its_pid() -> None:
    setup = Setup()
    assert setup.said == [
        f"kafka node {n} at 127.0.0.1:{39091 + n} (pid {2000 + 10 * n + 1}), "
        f"data in /run/broker-{n}"
        for n in (1, 2, 3)
    ]


def test_a_dead_node_is_reported_then_restarted_on_its_data_after_the_delay() -> None:
    setup = Setup(restart_delay_s=10)
    node = setup.node(2)
    dead_pid = node.pid
    node.die(-9)

    assert setup.settle() is True
    [report] = setup.warned
    assert report.startswith(
        f"kafka node 2 (pid {dead_pid}) exited on its own, exit code -9 (killed by SIGKILL); "
        "see /run/broker-2/logs/server.log; 2 of 3 nodes run; restarting it on its data in "
        "10 s (restart 1 of at most 3 within 600 s"
    )
    assert node.starts == 1  # not yet: the cluster runs without it meanwhile

    setup.clock.now += 9.9
    setup.settle()
    assert node.starts == 1
    setup.clock.now += 0.1
    assert setup.settle() is True
    assert node.starts == 2 and node.is_running()
    assert setup.said[-2:] == [
        "restarting kafka node 2 on its data in /run/broker-2",
        f"kafka node 2 is back at 127.0.0.1:39093 (pid {node.pid}), on its data in /run/broker-2",
    ]
    assert [n.starts for n in setup.cluster.nodes] == [1, 2, 1]  # the others ran on
    assert setup.cluster.stops == 0
    assert len(setup.warned) == 1  # reported once


def test_restarts_are_bounded_then_the_node_stays_down_until_requested() -> None:
    setup = Setup(restart_delay_s=0, max_restarts=2, window_s=600)
    node = setup.node(3)
    for _ in range(2):
        node.die(1)
        setup.settle()  # reported
        setup.clock.now += 1
        setup.settle()  # restarted
    assert node.starts == 3 and node.is_running()

    node.die(1)
    assert setup.settle() is True  # two nodes still serve
    setup.clock.now += 100
    setup.settle()
    assert node.starts == 3 and not node.is_running()
    assert "2 of 3 nodes run; it stays down, restarted 2 times within 600 s" in setup.warned[-1]
    assert "exit code 1;" in setup.warned[-1]

    assert setup.supervisor.restart_now() == [3]  # SIGUSR1
    setup.settle()
    assert node.starts == 4 and node.is_running()


def test_restarts_older_than_the_window_no_longer_count() -> None:
    setup = Setup(restart_delay_s=0, max_restarts=1, window_s=60)
    node = setup.node(1)
    node.die()
    setup.settle()
    setup.clock.now += 1
    setup.settle()
    assert node.starts == 2
    setup.clock.now += 61
    node.die()
    setup.settle()
    setup.clock.now += 1
    setup.settle()
    assert node.starts == 3 and node.is_running()


def test_a_failed_restart_is_reported_and_tried_again_within_the_budget() -> None:
    setup = Setup(restart_delay_s=5, max_restarts=2)
    node = setup.node(1)
    node.failures = ["port 39092 is already in use"]
    node.die(137)
    setup.settle()
    setup.clock.now += 5
    setup.settle()
    assert node.starts == 2 and not node.is_running()
    assert setup.warned[-2] == "kafka node 1 did not start again: port 39092 is already in use"
    assert setup.warned[-1].startswith(
        "kafka node 1 is still down; 2 of 3 nodes run; restarting it on its data in 5 s "
        "(restart 2 of at most 2"
    )
    setup.clock.now += 5
    setup.settle()
    assert node.starts == 3 and node.is_running()


def test_the_command_ends_once_no_node_runs_and_none_will_restart() -> None:
    setup = Setup(restart_delay_s=0, max_restarts=0)
    for node in setup.cluster.nodes[:2]:
        node.die()
    assert setup.settle() is True
    setup.cluster.nodes[2].die()
    assert setup.settle() is False


def test_stop_leaves_no_node_running_even_one_whose_restart_was_under_way() -> None:
    setup = Setup(restart_delay_s=0)
    node = setup.node(2)

    def after_the_stop() -> None:  # the restart gets past its start only after the stop
        setup.cluster.stopped.wait(5)

    node.before_start = after_the_stop
    node.die()
    setup.supervisor.check()
    setup.supervisor.check()  # the restart begins, and waits
    setup.supervisor.stop()
    assert not any(n.is_running() for n in setup.cluster.nodes)
    assert not any(w.thread and w.thread.is_alive() for w in setup.supervisor._watches.values())


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (-9, "exit code -9 (killed by SIGKILL)"),
        (1, "exit code 1"),
        (-99, "exit code -99"),
        (None, "exit code unknown"),
    ],
)
def test_exit_status(code: int | None, text: str) -> None:
    assert exit_status(code) == text


def test_stopping_a_node_ends_its_start_under_way_in_another_thread(tmp_path: Path) -> None:
    node = ClusterNode(
        tmp_path,
        node_id=1,
        port=39092,
        controller_ports=[39192, 39193],
        cluster_id="x",
        heap_mb=256,
        user=None,
        startup_timeout_s=60,
    )
    starting = subprocess.Popen(["sleep", "60"], start_new_session=True)
    node._process = starting  # a JVM launched by start(), which holds the node's lock
    with node._lock:
        stopper = threading.Thread(target=node.stop)
        stopper.start()
        assert starting.wait(5) == -15  # SIGTERM at once, while start() still holds the lock
    stopper.join(5)
    assert not stopper.is_alive() and not node.is_running()

"""The Kafka of a chaos run: the single embedded broker, or a local cluster of N nodes.

Either is a :data:`ChaosBroker`: start and wait, stop, alive, the bootstrap (a list on
a cluster), the tail of the log. The cluster also kills, stops and starts one node, and
reads the partitions' leaders and in-sync replicas.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TypeAlias

from chaos.common import ChaosError, now
from chaos.processes import Proc
from devstack.cluster import LocalCluster
from devstack.exceptions import BrokerError
from devstack.jvm import kafka_jvm, tail
from devstack.ports import free_port, free_run_of_ports
from onceonly.foundation.kafka import Admin, Connection, PartitionState


class SingleBroker(Proc):
    """``python -m devstack broker`` (the embedded KRaft broker) as a process; its JVM leads its own
    session, so a stop goes through the command, which stops the JVM cleanly."""

    nodes = 1

    def __init__(self, run_dir: Path, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        env = {**env, "ONCEONLY_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.port}"}
        super().__init__("broker", [sys.executable, "-m", "devstack", "broker"], env, log_path)
        self.run_dir = run_dir

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_and_wait(self, timeout_s: float = 120.0) -> None:
        before = self.log().count("kafka broker ready at")
        self.start()
        deadline = now() + timeout_s
        while self.log().count("kafka broker ready at") <= before:
            if not self.alive:
                raise ChaosError(f"the broker exited during start-up:\n{self.log_tail()}")
            if now() > deadline:
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
        pid = kafka_jvm(self.run_dir / "broker" / "broker.pid", self.run_dir)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


class ClusterBroker:
    """``python -m devstack broker --nodes N``'s cluster (devstack's LocalCluster), run from this
    process so that one node at a time can be killed, stopped and started: node ``n`` in
    ``<run_dir>/broker-<n>/``, on a run of free ports. Each node's log is its
    ``logs/server.log``, its console (WARN and above) ``logs/console.log``."""

    def __init__(self, run_dir: Path, nodes: int) -> None:
        self.cluster = LocalCluster(run_dir, port=free_run_of_ports(nodes), nodes=nodes, quiet=True)

    @property
    def nodes(self) -> int:
        return len(self.cluster.nodes)

    @property
    def node_ids(self) -> list[int]:
        return [node.node_id for node in self.cluster.nodes]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def alive(self) -> bool:
        return self.cluster.is_running()

    def start_and_wait(self, timeout_s: float = 120.0) -> None:
        try:
            self.cluster.start()
        except BrokerError as exc:
            raise ChaosError(f"the cluster did not start: {exc}") from exc

    def stop(self, timeout_s: float = 60.0) -> None:
        self.cluster.stop(timeout_s)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node's JVM, as a crash would."""
        self.cluster.node(node_id).kill()

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM one node (a controlled shutdown: it hands its leaderships over first)."""
        self.cluster.node(node_id).stop(timeout_s)

    def start_node(self, node_id: int) -> None:
        """Start one node on its data and ports; return once it answers a metadata request."""
        try:
            self.cluster.node(node_id).start()
        except BrokerError as exc:
            raise ChaosError(f"node {node_id} did not start again: {exc}") from exc

    def states(self, timeout_s: float = 5.0) -> list[PartitionState]:
        """Every partition's leader and in-sync replicas, from a fresh metadata request.
        Raises BrokerUnavailable."""
        return Admin(Connection(self.bootstrap), log_level=2).partition_states(timeout_s)

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(
            f"node {node.node_id} ({'up' if node.is_running() else 'DOWN'}), {node.log_path}:\n"
            + tail(node.log_path, lines)
            for node in self.cluster.nodes
        )


#: the broker of a chaos run; the node calls are ClusterBroker's alone (see broker_faults)
ChaosBroker: TypeAlias = SingleBroker | ClusterBroker

"""`python -m devstack broker --nodes 3`: three real JVMs, one cluster; a node killed from outside
is
reported and restarted on its data while the other two serve; Ctrl-C stops them all.

The tests share one run of the command (a cluster start is slow on a small machine): the
first kills a node and waits for it to come back, the second stops the command. Each
starts the command again if it is not running.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.jars import kafka_classpath
from onceonly.foundation.kafka import (
    Admin,
    AsyncProducer,
    Connection,
    Delivered,
    TopicMissing,
    TopicSpec,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
#: a dead node stays down this long before its restart: longer than a produce may take
#: (PRODUCE_TIMEOUT_MS), so that a produce acknowledged before the restart began went
#: through the other two nodes alone
RESTART_DELAY_S = 25
PRODUCE_TIMEOUT_MS = 15_000


@dataclass
class Command:
    process: subprocess.Popen[bytes]
    log: Path
    run_dir: Path
    port: int

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + n}" for n in range(3))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: Callable[[], bool], timeout_s: float, name: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not what():
            assert self.process.poll() is None, f"the command ended:\n{self.output()[-4000:]}"
            assert time.monotonic() < deadline, f"no {name}:\n{self.output()[-4000:]}"
            time.sleep(0.2)

    def node_pid(self, node_id: int) -> int:
        """Node ``node_id``'s JVM, as the command last said (at start, or once back)."""
        said = re.findall(rf"kafka node {node_id} (?:is back )?at \S+ \(pid (\d+)\)", self.output())
        assert said, self.output()[-4000:]
        return int(said[-1])

    def end(self) -> None:
        if self.process.poll() is None:  # SIGTERM stops the JVMs too; SIGKILL would orphan them
            self.process.terminate()
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Commands:
    """The one run of ``python -m devstack broker --nodes 3`` the tests share."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.current: Command | None = None

    def running(self) -> Command:
        if self.current is None or self.current.process.poll() is not None:
            self.current = self._start(self.tmp / f"run-{time.monotonic_ns()}")
        return self.current

    def _start(self, run_dir: Path) -> Command:
        from devstack.ports import free_run_of_ports

        kafka_classpath(run_dir)
        port = free_run_of_ports(3)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
        env.update(
            {
                "ONCEONLY_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
                "ONCEONLY_RUN_DIR": str(run_dir),
                "PYTHONUNBUFFERED": "1",
            }
        )
        log = run_dir.parent / f"{run_dir.name}.log"
        command = [sys.executable, "-m", "devstack", "broker", "--nodes", "3"]
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*command, "--restart-delay", str(RESTART_DELAY_S)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        started = Command(process, log, run_dir, port)
        try:
            started.wait_for(
                lambda: f"kafka broker ready at {started.bootstrap}" in started.output(),
                150,
                "ready line",
            )
        except BaseException:
            started.end()
            raise
        return started


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Commands]:
    tmp = tmp_path_factory.mktemp("cluster-command")
    runs = Commands(tmp)
    try:
        yield runs
    finally:
        if runs.current is not None:
            runs.current.end()
        shutil.rmtree(tmp, ignore_errors=True)


def _meta(run_dir: Path, node_id: int) -> dict[str, str]:
    text = (run_dir / f"broker-{node_id}" / "data" / "meta.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _is_jvm(pid: int) -> bool:
    try:
        return b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _min_insync(admin: Admin, topic: str) -> str | None:
    try:  # a new topic reaches each broker's metadata in its own time
        return admin.topic_configs([topic])[topic]["min.insync.replicas"]
    except TopicMissing:
        return None


async def _produce_to_each_partition(bootstrap: str, topic: str) -> list[Delivered]:
    connection = Connection(bootstrap, produce_timeout_ms=PRODUCE_TIMEOUT_MS)
    producer = AsyncProducer(connection, log_level=3)
    try:
        return list(
            await asyncio.gather(
                *(producer.produce(topic, b"still here", partition=p) for p in range(3))
            )
        )
    finally:
        producer.close()


def test_a_node_killed_from_outside_is_reported_and_restarted_while_the_others_serve(
    commands: Commands,
) -> None:
    command = commands.running()
    admin = Admin(Connection(command.bootstrap))
    topic = "survives-a-node"
    [status] = admin.ensure_topics([TopicSpec(topic, partitions=3, replication=3)])
    assert status.replicas == 3
    command.wait_for(lambda: _min_insync(admin, topic) == "2", 30, "min.insync.replicas=2")
    pids = {n: command.node_pid(n) for n in (1, 2, 3)}
    assert pids[2] == int((command.run_dir / "broker-2" / "broker.pid").read_text())
    data_before = _meta(command.run_dir, 2)

    os.kill(pids[2], signal.SIGKILL)  # as an operator would, from outside

    died = f"kafka node 2 (pid {pids[2]}) exited on its own, exit code -9 (killed by SIGKILL)"
    command.wait_for(lambda: died in command.output(), 15, "report of the death")
    assert command.process.poll() is None  # the command runs on
    survivors = f"127.0.0.1:{command.port},127.0.0.1:{command.port + 2}"
    delivered = asyncio.run(_produce_to_each_partition(survivors, topic))  # acks=all
    assert sorted(d.partition for d in delivered) == [0, 1, 2]
    # acknowledged before node 2's restart began: by nodes 1 and 3 alone
    assert "restarting kafka node 2" not in command.output()
    assert all(_is_jvm(pids[n]) for n in (1, 3))

    command.wait_for(lambda: "kafka node 2 is back at" in command.output(), 120, "restart")
    assert command.node_pid(2) != pids[2] and _is_jvm(command.node_pid(2))
    assert _meta(command.run_dir, 2) == data_before  # its own data, not formatted afresh
    command.wait_for(
        lambda: Admin(Connection(survivors)).broker_ids(5) == {1, 2, 3}, 30, "3 brokers"
    )
    assert {n: command.node_pid(n) for n in (1, 3)} == {1: pids[1], 3: pids[3]}


def test_three_nodes_answer_on_three_ports_with_one_cluster_id_and_stop_on_ctrl_c(
    commands: Commands,
) -> None:
    command = commands.running()
    for n in range(3):  # each node answers on its own port, and knows the others
        assert Admin(Connection(f"127.0.0.1:{command.port + n}")).broker_ids() == {1, 2, 3}
    ids = [_meta(command.run_dir, n)["cluster.id"] for n in (1, 2, 3)]
    assert len(set(ids)) == 1
    assert (command.run_dir / "cluster.id").read_text().strip() == ids[0]
    pids = [command.node_pid(n) for n in (1, 2, 3)]  # node 2's second JVM, after the test above

    command.process.send_signal(signal.SIGINT)
    assert command.process.wait(90) == 0
    assert not any(_is_jvm(pid) for pid in pids)  # every JVM is gone

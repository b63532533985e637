"""`onceonly broker --nodes 3`: three real JVMs, one cluster, started and stopped together."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack.jars import kafka_classpath
from foundation.kafka import Admin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def _cluster_ids(run_dir: Path) -> list[str]:
    ids = []
    for n in (1, 2, 3):
        meta = (run_dir / f"broker-{n}" / "data" / "meta.properties").read_text()
        ids += [
            line.split("=", 1)[1] for line in meta.splitlines() if line.startswith("cluster.id=")
        ]
    return ids


def test_three_nodes_answer_on_three_ports_with_one_cluster_id_and_stop_on_ctrl_c(
    tmp_path: Path,
) -> None:
    from devstack.ports import free_run_of_ports

    run_dir = tmp_path / "run"
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
    log = tmp_path / "broker.log"
    with log.open("wb") as out:
        broker = subprocess.Popen(
            [sys.executable, "-m", "onceonly", "broker", "--nodes", "3"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    bootstrap = ",".join(f"127.0.0.1:{port + n}" for n in range(3))
    try:
        deadline = time.monotonic() + 150
        while f"kafka broker ready at {bootstrap}" not in log.read_text():
            assert broker.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        for n in range(3):  # each node answers on its own port, and knows the others
            assert Admin(f"127.0.0.1:{port + n}").broker_ids() == {1, 2, 3}
        ids = _cluster_ids(run_dir)
        assert len(ids) == 3 and len(set(ids)) == 1
        assert (run_dir / "cluster.id").read_text().strip() == ids[0]
        pids = [int((run_dir / f"broker-{n}" / "broker.pid").read_text()) for n in (1, 2, 3)]

        broker.send_signal(signal.SIGINT)
        assert broker.wait(90) == 0
        for pid in pids:  # every JVM is gone
            assert (
                not Path(f"/proc/{pid}").exists()
                or b"kafka.Kafka" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            )
    finally:
        if broker.poll() is None:  # SIGTERM stops the JVMs too; SIGKILL would orphan them
            broker.terminate()
            try:
                broker.wait(90)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
        shutil.rmtree(run_dir, ignore_errors=True)

"""`onceonly up` (what `make run` runs): a whole local stack, from a signed POST to a reply."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devstack.ports import free_port
from testkit import payloads, signing

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def _wait_for(predicate: object, timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.3)


def test_up_runs_broker_topics_worker_and_ingest_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    ingest_port, worker_port, kafka_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env.pop("AGENTMAIL_API_KEY", None)
    env.update(
        {
            "ONCEONLY_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
            "ONCEONLY_INGEST_PORT": str(ingest_port),
            "ONCEONLY_WORKER_PORT": str(worker_port),
            "ONCEONLY_RUN_DIR": str(tmp_path / "run"),
            "ONCEONLY_DATA_DIR": str(tmp_path / "worker"),
            "ONCEONLY_PARTITIONS": "2",
            "ONCEONLY_REORDER_WINDOW_MS": "200",
            "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": signing.SVIX_SECRET,
            "PYTHONUNBUFFERED": "1",
        }
    )
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "onceonly", "up"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(lambda: "Ctrl-C stops everything" in log.read_text(), 120, "the stack", log)
        body = payloads.dumps(payloads.agentmail_received(message_id="<up@example.com>"))
        request = urllib.request.Request(
            f"http://127.0.0.1:{ingest_port}/webhooks/agentmail",
            data=body,
            headers=signing.svix_headers(body),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204

        outbox = tmp_path / "run" / "dry-run-outbox.jsonl"
        # the outbox file exists from its open() on: wait for its whole line
        _wait_for(
            lambda: outbox.exists() and outbox.read_text().endswith("\n"),
            90,
            "the dry-run reply",
            log,
        )
        [reply] = [json.loads(line) for line in outbox.read_text().splitlines()]
        assert reply["message_id"] == "<up@example.com>"
        # the worker it started serves the operator page it printed
        ops = f"http://127.0.0.1:{worker_port}/ops"
        assert f"operator   {ops} (worker, read-only" in log.read_text()
        with urllib.request.urlopen(ops, timeout=30) as page:
            assert "onceonly operator page" in page.read().decode()

        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
        assert "stopping kafka" in log.read_text()
    finally:
        if up.poll() is None:
            up.kill()

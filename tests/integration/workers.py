"""Real worker processes for integration tests, and a way to feed them deliveries."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest import normalise
from onceonly.broker import free_port
from onceonly.kafka import AsyncProducer
from onceonly.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def worker_env(
    settings: Settings, *, mail_url: str, data_dir: Path, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env.update(
        {
            "ONCEONLY_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "ONCEONLY_PARTITIONS": str(settings.partitions),
            "ONCEONLY_DELIVERIES_TOPIC": settings.deliveries_topic,
            "ONCEONLY_LEDGER_TOPIC": settings.ledger_topic,
            "ONCEONLY_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
            "ONCEONLY_APP_ID": settings.app_id,
            "ONCEONLY_DATA_DIR": str(data_dir),
            "ONCEONLY_RUN_DIR": str(data_dir / "run"),
            "ONCEONLY_REORDER_WINDOW_MS": str(settings.reorder_window_ms),
            "ONCEONLY_SEND_ATTEMPTS": str(settings.send_attempts),
            "ONCEONLY_AGENTMAIL_BASE_URL": mail_url,
            "AGENTMAIL_API_KEY": "test-api-key",
            "ONCEONLY_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """``onceonly worker`` as a real process: start, SIGKILL, restart with the same state."""

    name: str
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    #: False once the test stopped or killed it on purpose
    expected: bool = True

    def start(self) -> WorkerProcess:
        self.expected = True
        env = {**self.env, "ONCEONLY_WORKER_PORT": str(self.port)}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "onceonly", "worker"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        self.expected = False
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self.expected = False
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


async def produce_agentmail(
    producer: AsyncProducer, settings: Settings, payload: dict[str, Any]
) -> None:
    """What ingest would produce for this AgentMail payload (ingest is tested on its own)."""
    body = json.dumps(payload)
    envelope = normalise.agentmail(body, {}, datetime.now(UTC))
    await producer.produce(
        settings.deliveries_topic,
        envelope.encode(),
        key=envelope.thread_key.encode(),
        headers=envelope.headers(),
    )


async def wait_for(
    condition: Callable[[], bool], *, timeout_s: float, what: str, logs: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}; worker log tail:\n{logs()[-3000:]}"
            )
        await asyncio.sleep(0.2)

"""`python -m devstack up` as a child process on free ports, for the tests of the local stack."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.3)


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    log: Path
    run_dir: Path
    ingest_url: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def up_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A clean environment (no ONCEONLY_* of the caller's, no mail key) on free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env.pop("AGENTMAIL_API_KEY", None)
    env.update(
        {
            "ONCEONLY_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
            "ONCEONLY_INGEST_PORT": str(free_port()),
            "ONCEONLY_WORKER_PORT": str(free_port()),
            "ONCEONLY_RUN_DIR": str(tmp / "run"),
            "ONCEONLY_DATA_DIR": str(tmp / "worker"),
            "ONCEONLY_PARTITIONS": "2",
            "ONCEONLY_REORDER_WINDOW_MS": "200",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


@contextmanager
def running_up(tmp: Path, env: dict[str, str]) -> Iterator[Up]:
    """Start `python -m devstack up`, wait for its "Ctrl-C stops everything", kill it at the end."""
    log = tmp / "up.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "devstack", "up"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its worker and broker can be stopped as one group
        )
    up = Up(process, env, log, tmp / "run", f"http://127.0.0.1:{env['ONCEONLY_INGEST_PORT']}")
    try:
        wait_for(lambda: "Ctrl-C stops everything" in up.output(), 120, "the stack", log)
        yield up
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a user stops it (it stops its worker and broker); the group's SIGKILL
    if that does not end it within a minute."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)

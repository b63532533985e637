"""The processor benchmark's processes: environment, metrics scrape, RSS, liveness, progress."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bench._procs import BenchError, ServerProcess, alive

T = TypeVar("T")

#: How long without progress before a phase is declared stuck.
STALL_S = 90.0


def base_env(extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without any ONCEONLY_* variable (nor an AgentMail key)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("ONCEONLY_") and k.upper() != "AGENTMAIL_API_KEY"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def ingest_env(
    bootstrap: str, partitions: int, port: int, run_dir: Path, topics: dict[str, str], **more: str
) -> dict[str, str]:
    """``onceonly ingest``'s settings: on ``port``, against the broker and ``topics``."""
    return {
        "ONCEONLY_KAFKA_BOOTSTRAP": bootstrap,
        "ONCEONLY_PARTITIONS": str(partitions),
        "ONCEONLY_INGEST_HOST": "127.0.0.1",
        "ONCEONLY_INGEST_PORT": str(port),
        "ONCEONLY_RUN_DIR": str(run_dir),
        "ONCEONLY_LOG_LEVEL": "WARNING",
        **topics,
        **more,
    }


def serve(name: str, module: str, log: Path) -> tuple[ServerProcess, int]:
    """``python -m <module> --port <a free port>`` started and answering ``/healthz``: the
    process (the caller stops it) and its port."""
    from devstack.ports import free_port

    port = free_port()
    argv = [sys.executable, "-m", module, "--port", str(port)]
    process = ServerProcess(name, argv, base_env({}), log)
    process.start()
    try:
        asyncio.run(process.wait_ready(f"http://127.0.0.1:{port}/healthz"))
    except BaseException:
        process.stop()
        raise
    return process, port


def get_json(url: str, timeout_s: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def scrape(port: int) -> dict[str, float] | None:
    """The worker's /metrics samples (name with labels -> value), None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def group_rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB summed over the process group led by ``pid`` (the worker and
    any child it started)."""
    rss = hwm = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii")
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp != pid:
                continue
            for line in (entry / "status").read_text(encoding="ascii").splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return rss / 1024, hwm / 1024


def kill_hard(process: ServerProcess) -> None:
    """SIGKILL the process group, as a crash would, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.stop()  # reaps it: the group is already gone


def check_alive(process: ServerProcess, what: str) -> None:
    if process.process is None or not alive(process.pid):
        raise BenchError(f"{process.name} exited while {what}; its output:\n{process.log_tail()}")


def poll(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, every_s: float) -> T:
    """``read()`` every ``every_s`` until ``done`` says so of it or ``timeout_s`` has passed;
    its last value."""
    deadline = time.monotonic() + timeout_s
    while not done(value := read()) and time.monotonic() < deadline:
        time.sleep(every_s)
    return value


def wait_progress(
    read: Callable[[], int],
    target: int,
    *,
    what: str,
    process: ServerProcess,
    every_s: float,
    on_sample: Callable[[int], None] | None = None,
    stall_s: float = STALL_S,
) -> None:
    """Poll ``read()`` until it reaches ``target``; fail if it stops moving for ``stall_s``."""
    last_value = -1
    last_move = time.monotonic()
    while True:
        value = read()
        if on_sample is not None:
            on_sample(value)
        if value >= target:
            return
        if value != last_value:
            last_value, last_move = value, time.monotonic()
        elif time.monotonic() - last_move > stall_s:
            raise BenchError(
                f"{what}: stuck at {value:,} of {target:,} for {stall_s:g} s; "
                f"{process.name} output:\n{process.log_tail()}"
            )
        check_alive(process, what)
        time.sleep(every_s)

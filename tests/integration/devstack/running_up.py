"""`python -m devstack up` as a child process on free ports, for the tests of the local stack."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devstack.ports import free_port
from testkit import payloads, signing

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


def devstack_send(up: Up) -> subprocess.CompletedProcess[str]:
    """``python -m devstack send --wait 90`` against the running stack ``up``."""
    return subprocess.run(
        [sys.executable, "-m", "devstack", "send", "--wait", "90"],
        env=up.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


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


# ------------------------------------------------------------------ a newcomer's fresh shell

#: variables a fresh terminal does not have: an activated virtualenv, a make that runs us
_NOT_IN_A_FRESH_SHELL = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAKEFLAGS", "MAKELEVEL")


def _virtualenv_bins() -> set[str]:
    return {os.path.realpath(p) for p in (Path(sys.prefix) / "bin", ROOT / ".venv" / "bin")}


def fresh_shell_env(tmp: Path) -> dict[str, str]:
    """A new terminal's environment: no virtualenv on PATH or activated, nothing on
    PYTHONPATH, no ONCEONLY_* of the caller's; only free ports and a run directory under
    ``tmp`` (a newcomer has the defaults; a test shares the machine)."""
    env = {k: v for k, v in up_env(tmp).items() if k not in _NOT_IN_A_FRESH_SHELL}
    for tuned in ("ONCEONLY_PARTITIONS", "ONCEONLY_REORDER_WINDOW_MS"):
        env.pop(tuned)  # the defaults, as a newcomer has them
    bins = _virtualenv_bins()
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and os.path.realpath(p) not in bins)
    return env


@dataclass
class Shell:
    """A command typed in a terminal of its own, running in the background."""

    process: subprocess.Popen[bytes]
    env: dict[str, str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_in_shell(command: str, tmp: Path, env: dict[str, str]) -> Iterator[Shell]:
    """``bash -c command`` at the checkout's root, in a process group of its own (a
    terminal's); Ctrl-C to the whole group at the end, as a terminal sends it."""
    run_dir = Path(env["ONCEONLY_RUN_DIR"])
    run_dir.mkdir(parents=True, exist_ok=True)
    fetched = ROOT / ".run" / "kafka.classpath"
    if fetched.exists():  # the jars a checkout fetched once: no Maven run per test
        shutil.copy2(fetched, run_dir / "kafka.classpath")
    log = tmp / "terminal-1.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", command],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    shell = Shell(process, env, log)
    try:
        wait_for(lambda: "Ctrl-C stops everything" in shell.output(), 180, command, log)
        yield shell
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the process group (make and what it runs), then SIGKILL to whatever of
    it is left after a minute."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def post_sample(up: Up, message_id: str) -> int:
    """Post a signed AgentMail ``message.received`` for ``message_id`` to the stack's ingest
    (the development secret of ``up_env``'s callers: testkit's SVIX_SECRET); its status."""
    body = payloads.dumps(payloads.agentmail_received(message_id=message_id))
    request = urllib.request.Request(
        f"{up.ingest_url}/webhooks/agentmail",
        data=body,
        headers=signing.svix_headers(body),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)

"""`python -m devstack up` as a child process on free ports, for the tests of the local stack."""

from __future__ import annotations

import contextlib
import functools
import os
import re
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


#: the stack is ready when it prints this
READY = "Ctrl-C stops everything"
#: starts tried when a port picked for the stack was taken before the stack bound it
_STARTS = 3


def taken_ports(output: str) -> set[int]:
    """The port numbers on the lines of ``output`` that report an address already in use."""
    taken: set[int] = set()
    for line in output.splitlines():
        if "already in use" in line.lower():
            taken.update(int(n) for n in re.findall(r"\b(\d{4,5})\b", line))
    return taken


def pick_again(env: dict[str, str], taken: set[int]) -> bool:
    """Give every ``ONCEONLY_*`` variable of ``env`` naming a local port in ``taken`` a
    free port instead; whether any did."""
    changed = False
    for key, value in env.items():
        host, colon, port = value.rpartition(":")
        local = not colon or host == "127.0.0.1"
        if key.startswith("ONCEONLY_") and port.isdigit() and local and int(port) in taken:
            env[key] = f"{host}{colon}{free_port()}"
            changed = True
    return changed


def _ready_or_ended(process: subprocess.Popen[bytes], log: Path) -> bool:
    return READY in log.read_text(errors="replace") or process.poll() is not None


def start_until_ports_hold(
    command: list[str], env: dict[str, str], log: Path, timeout_s: float
) -> subprocess.Popen[bytes]:
    """Run ``command`` (its own process group, output to ``log``) until it prints
    :data:`READY`. A port picked free for it can be bound by another test's listener before
    the stack binds it; a start that ends reporting one of its ports in use is tried again on
    a new free port (``env`` is updated), up to three starts."""
    for start in range(1, _STARTS + 1):
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # its worker and broker can be stopped as one group
            )  # fmt: skip
        settled = functools.partial(_ready_or_ended, process, log)
        wait_for(settled, timeout_s, "the stack", log)
        output = log.read_text(errors="replace")
        if READY in output:
            return process
        stop_group(process)
        if start == _STARTS or not pick_again(env, taken_ports(output)):
            raise AssertionError(f"the stack ended before it was ready:\n{output[-4000:]}")
        log.replace(log.with_name(f"{log.name}.{start}"))
    raise AssertionError("unreachable")


@contextmanager
def running_up(tmp: Path, env: dict[str, str]) -> Iterator[Up]:
    """Start `python -m devstack up`, wait for its "Ctrl-C stops everything", kill it at the end.
    A port of ``env``'s taken before the stack bound it is picked again (``env`` is updated)."""
    log = tmp / "up.log"
    process = start_until_ports_hold([sys.executable, "-m", "devstack", "up"], env, log, 120)
    up = Up(process, env, log, tmp / "run", f"http://127.0.0.1:{env['ONCEONLY_INGEST_PORT']}")
    try:
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
    process = start_until_ports_hold(["bash", "-c", command], env, log, 180)
    shell = Shell(process, env, log)
    try:
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

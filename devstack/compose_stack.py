"""docker-compose.yml driven by podman-compose, for ``make compose-test``.

podman-compose 1.0 (Debian bookworm's) starts services without waiting for
``depends_on`` conditions, reads ``deploy.replicas`` but not ``--scale``, and podman
runs health checks only when asked (no systemd timers here): so :class:`Stack` brings
the services up in the order the conditions say and runs each health check itself
(``podman healthcheck run``) until it passes. The pure parts (the consumer group's
assignment, the outbox's replies per message) are functions with unit tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
OUTBOX = "dry-run-outbox.jsonl"


class StackError(RuntimeError):
    """A step of the compose test failed; the message says which and what was seen."""


@dataclass(frozen=True)
class Assignment:
    """One partition of a topic in ``kafka-consumer-groups --describe``."""

    partition: int
    consumer_id: str  #: "-" when no member holds it
    host: str  #: the member's address as the broker saw it, without the leading "/"


def parse_group_describe(text: str, topic: str) -> list[Assignment]:
    """The rows of ``topic`` in ``kafka-consumer-groups --describe`` output, by partition."""
    rows: list[Assignment] = []
    header: list[str] | None = None
    for line in text.splitlines():
        words = line.split()
        if "PARTITION" in words and "CONSUMER-ID" in words:
            header = words
            continue
        if header is None or len(words) != len(header):
            continue
        row = dict(zip(header, words, strict=True))
        if row.get("TOPIC") != topic:
            continue
        host = row.get("HOST", "-")
        rows.append(Assignment(int(row["PARTITION"]), row["CONSUMER-ID"], host.lstrip("/")))
    return sorted(rows, key=lambda a: a.partition)


def partitions_by_host(assignments: Sequence[Assignment]) -> dict[str, list[int]]:
    """Host -> the partitions its member holds; unassigned partitions under ``"-"``."""
    out: dict[str, list[int]] = {}
    for a in assignments:
        out.setdefault(a.host if a.consumer_id != "-" else "-", []).append(a.partition)
    return out


def replies_per_message(lines: Sequence[str]) -> dict[str, list[str]]:
    """Message id -> the idempotency key of each reply the dry-run outbox holds for it, one
    per line (a send repeated with the same key is a line again: the outbox remembers its
    keys per process, where the real API remembers them for every caller)."""
    out: dict[str, list[str]] = {}
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            out.setdefault(entry["message_id"], []).append(entry["key"])
    return out


@dataclass(frozen=True)
class Verdict:
    """What became of the expected messages, judged as the mail API would see them."""

    unanswered: list[str]
    #: more than one idempotency key: two emails even from an API that honours keys
    answered_twice: list[str]
    #: one key sent more than once: one email from the API, two lines in the dry-run outbox
    resent_same_key: list[str]


def reply_verdict(expected: Sequence[str], replies: Mapping[str, Sequence[str]]) -> Verdict:
    unanswered = [m for m in expected if not replies.get(m)]
    twice = [m for m in expected if len(set(replies.get(m, ()))) > 1]
    resent = [m for m in expected if len(set(replies.get(m, ()))) == 1 < len(replies[m])]
    return Verdict(unanswered, twice, resent)


def group_table(text: str, topic: str) -> str:
    """``kafka-consumer-groups --describe`` cut to its header and ``topic``'s rows, by
    partition (the group also holds faust's changelogs and standbys)."""
    lines = text.strip().splitlines()
    header = next((line for line in lines if "PARTITION" in line.split()), "")
    rows = [line for line in lines if len(line.split()) > 2 and line.split()[1] == topic]
    rows.sort(key=lambda line: int(line.split()[2]))
    return "\n".join([header, *rows])


def run(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 600
) -> str:
    """Run ``command``; its stdout, or a StackError with its last lines."""
    result = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=dict(env) if env is not None else None,
        cwd=ROOT,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise StackError(f"{' '.join(command)} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


class Stack:
    """One compose project of docker-compose.yml, run with podman-compose."""

    def __init__(
        self,
        project: str,
        variables: Mapping[str, str],
        files: Sequence[Path] = (COMPOSE_FILE,),
    ) -> None:
        self.project = project
        self.variables = dict(variables)
        self.files = tuple(files)  #: docker-compose.yml, then any override, in order
        #: a container's failed health checks before it passed: how many, and the last one's
        #: words (why a slow start was slow), by container name
        self.failed_checks: dict[str, tuple[int, str]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.variables, **extra}

    def container(self, service: str, number: int = 1) -> str:
        """podman-compose 1.0's container name: ``<project>_<service>_<n>``."""
        return f"{self.project}_{service}_{number}"

    def compose(self, *args: str, timeout: float = 600) -> str:
        files = [arg for path in self.files for arg in ("-f", str(path))]
        command = ["podman-compose", "-p", self.project, *files, *args]
        return run(command, env=self.env(), timeout=timeout)

    def up(self, *services: str) -> None:
        """Create and start ``services`` only (their dependencies are the caller's order)."""
        self.compose("up", "-d", "--no-deps", "--no-build", *services)

    def down(self) -> None:
        """``down -v``: every container, and the volumes; then nothing of the project left."""
        self.variables["ONCEONLY_WORKERS"] = "3"  # so that every replica's name is known
        self.compose("down", "-v", timeout=300)
        label = f"label=io.podman.compose.project={self.project}"
        left = run(["podman", "ps", "-aq", "--filter", label]).split()
        if left:
            run(["podman", "rm", "--force", "--volumes", *left])
        for volume in run(["podman", "volume", "ls", "-q", "--filter", label]).split():
            run(["podman", "volume", "rm", "--force", volume])
        networks = run(["podman", "network", "ls", "--format", "{{.Name}}"]).split()
        if f"{self.project}_default" in networks:
            run(["podman", "network", "rm", "--force", f"{self.project}_default"])

    def wait_healthy(self, name: str, timeout_s: float = 240.0) -> float:
        """Run ``name``'s health check until it passes; the seconds it took."""
        started = time.monotonic()
        last = ""
        failed = 0
        while time.monotonic() - started < timeout_s:
            check = subprocess.run(
                ["podman", "healthcheck", "run", name], capture_output=True, text=True, check=False
            )
            if check.returncode == 0:
                if failed:
                    self.failed_checks[name] = (failed, last)
                return time.monotonic() - started
            failed += 1
            last = (check.stdout + check.stderr).strip()
            if self.state(name) in {"exited", "stopped"}:
                break
            time.sleep(2.0)
        logs = self.logs(name, lines=20)
        raise StackError(
            f"{name} not healthy after {time.monotonic() - started:.0f} s "
            f"(state {self.state(name)}; check: {last or '-'}); its last lines:\n{logs}"
        )

    def wait_exit(self, name: str, timeout_s: float = 180.0) -> int:
        """Wait for the one-shot container ``name``; its exit status."""
        out = run(["podman", "wait", name], timeout=timeout_s)
        return int(out.strip().splitlines()[-1])

    def state(self, name: str) -> str:
        result = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.Status}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout.strip() or "absent"

    def restarts(self, name: str) -> int:
        out = run(["podman", "inspect", "--format", "{{.RestartCount}}", name]).strip()
        return int(out or 0)

    def logs(self, name: str, *, lines: int = 50) -> str:
        result = subprocess.run(
            ["podman", "logs", "--tail", str(lines), name], capture_output=True, text=True
        )
        return (result.stdout + result.stderr).strip()

    def address(self, name: str) -> str:
        """The container's address on the compose network (what the broker sees)."""
        template = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        return run(["podman", "inspect", "--format", template, name]).split()[0]

    def crash(self, name: str) -> None:
        """SIGKILL the container's main process from the host, as a crash or the OOM
        killer would: the container exits 137 and its restart policy decides what next."""
        pid = int(run(["podman", "inspect", "--format", "{{.State.Pid}}", name]).strip())
        os.kill(pid, signal.SIGKILL)

    def volume_path(self, volume: str) -> Path:
        """Where the project's named ``volume`` lives on this host (podman's local driver)."""
        name = f"{self.project}_{volume}"
        return Path(
            run(["podman", "volume", "inspect", "--format", "{{.Mountpoint}}", name]).strip()
        )

    def outbox_lines(self) -> list[str]:
        """The dry-run outbox in the workers' shared volume (worker-run), line by line."""
        path = self.volume_path("worker-run") / OUTBOX
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []

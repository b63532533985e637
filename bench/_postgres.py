"""The database of the ingest benchmark's baseline (d): Debian's PostgreSQL, started for the
run in a data directory of its own (``.run/bench-pg-*``), with its defaults (fsync on),
stopped and removed on exit; installed with apt-get and run as ``postgres`` when root."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench._procs import ROOT, BenchError, alive, console, debian_package

#: The user PostgreSQL runs as when the benchmark runs as root (Debian's package creates it).
SERVICE_USER = "postgres"
#: The database role the benchmark connects as (trust authentication, loopback only).
ROLE = "bench"

#: The table of the reference design: one row per event, the event id its primary key.
SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    event_id text PRIMARY KEY,
    body jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT = "INSERT INTO deliveries (event_id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING"


@dataclass(frozen=True, slots=True)
class Postgres:
    dsn: str
    pid: int  #: the postmaster's; its backends are its children
    version: str  #: the major version of the binaries, e.g. "15"
    log_path: Path


def _major(path: Path) -> tuple[int, ...]:
    found = re.search(r"/postgresql/([\d.]+)/bin", str(path))
    return tuple(int(part) for part in found.group(1).split(".")) if found else (0,)


def _installed() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=_major)
    return found[-1].parent if found else None


def binaries() -> Path:
    """The directory of Debian's PostgreSQL binaries; installs the package if missing."""
    return debian_package("postgresql", _installed, "PostgreSQL (/usr/lib/postgresql/*/bin)")


def _as_user() -> list[str]:
    """The prefix that runs a command as the user PostgreSQL accepts to run as."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise BenchError("running as root needs runuser (util-linux) to start PostgreSQL")
    return [runuser, "-u", SERVICE_USER, "--"]


def _base_dir() -> Path:
    """A new directory for the data directory, under the project's run directory when
    the service user can reach it there, else under the system's temporary directory."""
    from onceonly.foundation.settings import Settings

    run_dir = (ROOT / Settings.from_env().run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    parent = run_dir
    if os.geteuid() == 0:
        probe = subprocess.run([*_as_user(), "test", "-x", str(run_dir)], check=False)
        if probe.returncode != 0:
            parent = Path(tempfile.gettempdir())
    base = Path(tempfile.mkdtemp(prefix="bench-pg-", dir=parent))
    if os.geteuid() == 0:
        shutil.chown(base, SERVICE_USER, SERVICE_USER)
    return base


def _run(argv: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        tail = ""
        if log is not None and log.exists():
            tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(
            f"{what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}{tail}"
        )


def _start(bindir: Path, user: list[str], data: Path, log: Path, port: int) -> None:
    """initdb (trust, UTF8, no fsync at init) and pg_ctl start on 127.0.0.1:``port``."""
    init = ["--username", ROLE, "--auth", "trust", "--encoding", "UTF8", "--locale", "C"]
    _run([*user, str(bindir / "initdb"), "--pgdata", str(data), *init, "--no-sync"], "initdb")
    console.print(f"starting PostgreSQL {_major(bindir)[0]} at 127.0.0.1:{port} …")
    wait = ["--wait", "--timeout", "60", "-o", f"-h 127.0.0.1 -p {port} -k {data}"]
    ctl = [*user, str(bindir / "pg_ctl"), "--pgdata", str(data), "--log", str(log), *wait]
    _run([*ctl, "start"], "pg_ctl start", log)


def _postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text(encoding="ascii").splitlines()[0])


def _stop(bindir: Path, user: list[str], data: Path, pid: int) -> None:
    """pg_ctl stop -m fast, then SIGKILL after 10 s if it is still there."""
    console.print("stopping PostgreSQL …")
    subprocess.run(
        [*user, str(bindir / "pg_ctl"), "--pgdata", str(data), "-m", "fast", "-w", "stop"],
        capture_output=True,
        check=False,
        timeout=120,
    )
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the run, on 127.0.0.1 on a free port; stopped on exit."""
    from devstack.ports import free_port

    bindir = binaries()
    user = _as_user()
    base = _base_dir()
    data = base / "data"
    log = base / "postgres.log"
    port = free_port()
    pid: int | None = None
    try:
        _start(bindir, user, data, log, port)
        pid = _postmaster_pid(data)
        version = ".".join(str(n) for n in _major(bindir))
        yield Postgres(f"postgresql://{ROLE}@127.0.0.1:{port}/postgres", pid, version, log)
    finally:
        if pid is None:  # interrupted while it started: it may run all the same
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = _postmaster_pid(data)
        if pid is not None:
            _stop(bindir, user, data, pid)
        shutil.rmtree(base, ignore_errors=True)


async def describe_postgres(dsn: str, version: str) -> str:
    """What (d)'s database is, for the report: its version and durability settings."""
    import asyncpg

    connection = await asyncpg.connect(dsn)
    try:
        names = ("fsync", "synchronous_commit", "shared_buffers", "wal_level")
        settings = [f"{n} {await connection.fetchval(f'SHOW {n}')}" for n in names]
        full = await connection.fetchval("SHOW server_version")
    finally:
        await connection.close()
    return f"PostgreSQL {full} (Debian's package, major {version}): " + ", ".join(settings)

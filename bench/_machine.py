"""What the benchmarks' figures were measured on: the machine, the versions, the load, the code."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from bench._procs import ROOT

#: The libraries of the worker whose versions a report gives.
LIBRARIES = ("faust-streaming", "mode-streaming", "aiokafka", "rocksdict", "agentmail", "httpx")


def _first(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key:
                return value.strip()
    except OSError:
        return None
    return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine(kafka: str) -> list[tuple[str, str]]:
    """What the figures were measured on, as (item, value) pairs."""
    import confluent_kafka

    mem_kb = _first("/proc/meminfo", "MemTotal")
    mem = f"{int(mem_kb.split()[0]) / 1024**2:.1f} GiB" if mem_kb else "unknown"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    librdkafka = confluent_kafka.libversion()[0]
    return [
        ("CPU", _first("/proc/cpuinfo", "model name") or platform.processor() or "unknown"),
        ("cores", f"{os.cpu_count()} logical, {usable} usable by this process"),
        ("memory", mem),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        (
            "libraries",
            f"aiohttp {_version('aiohttp')}, svix {_version('svix')}, "
            f"confluent-kafka {_version('confluent-kafka')} (librdkafka {librdkafka}), "
            f"asyncpg {_version('asyncpg')}",
        ),
        (
            "processor libraries",
            ", ".join(f"{name} {_version(name)}" for name in LIBRARIES),
        ),
        ("Kafka", kafka),
    ]


def loadavg() -> str:
    """The machine's load average over 1, 5 and 15 minutes."""
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])
    except OSError:
        return "unknown"


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()


def revision() -> str:
    """The commit the code under test comes from, and whether it had local changes."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "onceonly")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    if dirty:
        return f"{head}, with uncommitted changes under onceonly/"
    return head

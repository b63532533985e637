"""The benchmarks' processes: the broker, servers under test, their CPU time."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from bench._threads import runqueue_wait_seconds
from testkit.processes import Supervised

if TYPE_CHECKING:
    from onceonly.foundation.settings import Settings

#: The repository root: servers run from here so that ``-m bench._servers`` resolves.
ROOT = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")

# Wide enough for the tables when the output is a pipe or a file (make bench | tee).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)


class BenchError(Exception):
    """The benchmark could not run; the message says what to do."""


class ServerProcess(Supervised):
    """One server under test, in its own process group; stopped on exit, whatever happens."""

    error = BenchError

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, argv, env, log_path, append=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        self.process = None


async def reap(process: asyncio.subprocess.Process) -> None:
    """Kill ``process`` if it still runs (a cancelled or failed measurement), and wait."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (its state first), or
    None when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (read from /proc, so nothing is reaped here; a zombie does not)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process (all its threads) so far; ours if ``pid`` is
    None; NaN if it cannot be read."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = stat_fields(pid)
    return float("nan") if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS


def tree_pids(pid: int) -> set[int]:
    """``pid`` and every live descendant."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text(encoding="ascii")
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grown = {pid}, True
    while grown:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of ``pid`` and of every live descendant (PostgreSQL's backends
    are children of its postmaster); NaN if ``pid`` cannot be read."""
    total = cpu_seconds(pid)
    for member in tree_pids(pid) - {pid}:
        value = cpu_seconds(member)
        if not math.isnan(value):  # a backend that exited meanwhile
            total += value
    return total


def _machine_seconds() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of the whole machine so far (all CPUs; /proc/stat), NaN if
    unknown. Stolen: time a virtual CPU was ready to run while the host ran something else;
    busy counts it too."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return math.nan, math.nan
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICKS, steal / _TICKS


class CpuWindow:
    """CPU use of named processes between :meth:`begin` and :meth:`end`, in % of one core,
    and ``other``: what the rest of the machine used meanwhile (other processes, and
    kernel work not charged to ours), which shows whether the figures had the CPUs alone.

    Beside them, in % of the window: :attr:`steal`, what the host took from this
    machine's CPUs (of one core), and :attr:`waited`, how long the main thread of each
    named process (a server's event loop) was ready to run but waited for a CPU."""

    def __init__(self, pids: dict[str, int | None], trees: frozenset[str] = frozenset()) -> None:
        self.pids = pids
        #: names whose process counts with all its descendants
        self.trees = trees
        self.percent: dict[str, float] = {}
        self.steal = math.nan
        self.waited: dict[str, float] = {}
        self._start: dict[str, float] = {}
        self._waits: dict[str, float] = {}
        self._busy = 0.0
        self._steal = 0.0
        self._t0 = 0.0

    def begin(self) -> None:
        self._t0 = time.perf_counter()
        self._busy, self._steal = _machine_seconds()
        self._start = {name: self._seconds(name, pid) for name, pid in self.pids.items()}
        self._waits = {name: runqueue_wait_seconds(pid) for name, pid in self.pids.items()}

    def _seconds(self, name: str, pid: int | None) -> float:
        if name in self.trees and pid is not None:
            return tree_cpu_seconds(pid)
        return cpu_seconds(pid)

    def end(self) -> None:
        elapsed = time.perf_counter() - self._t0
        self.percent = {
            name: 100 * (self._seconds(name, pid) - self._start[name]) / elapsed
            for name, pid in self.pids.items()
        }
        busy_s, steal_s = _machine_seconds()
        busy = 100 * (busy_s - self._busy) / elapsed
        self.percent["other"] = max(0.0, busy - sum(self.percent.values()))
        self.steal = 100 * (steal_s - self._steal) / elapsed
        self.waited = {
            name: 100 * (runqueue_wait_seconds(pid) - self._waits[name]) / elapsed
            for name, pid in self.pids.items()
        }

    async def measure(self, after_s: float, for_s: float) -> None:
        await asyncio.sleep(after_s)
        self.begin()
        await asyncio.sleep(for_s)
        self.end()


def kafka_version(classpath: str | None) -> str:
    """The broker's Kafka version, read from its jar on the classpath."""
    if classpath:
        found = re.search(r"kafka_2\.13-(\d[\w.\-]*?)\.jar", classpath)
        if found:
            return found.group(1)
    return "unknown"


@dataclass(frozen=True, slots=True)
class Broker:
    """The Kafka the benchmarks produce to."""

    bootstrap: str
    about: str  #: its version and kind, for the report
    pid: int | None  #: the JVM's, for CPU figures; None for an external cluster


@contextlib.contextmanager
def kafka(run_dir: Path) -> Iterator[Broker]:
    """A broker for the run. An :class:`~devstack.broker.EmbeddedBroker` on a free port in
    ``run_dir``, stopped on exit; or the cluster named by ``ONCEONLY_KAFKA_BOOTSTRAP``."""
    external = os.environ.get("ONCEONLY_KAFKA_BOOTSTRAP")
    if external:
        yield Broker(external, f"external cluster at {external} (ONCEONLY_KAFKA_BOOTSTRAP)", None)
        return
    from devstack.broker import EmbeddedBroker, free_port, kafka_classpath
    from onceonly.foundation.settings import Settings

    # Resolve the jars once into the project's run directory (as `make jars` does) and
    # reuse that classpath, so that the temporary run directory does not run Maven again.
    cached_dir = (ROOT / Settings.from_env().run_dir).resolve()
    classpath = kafka_classpath(cached_dir)
    shutil.copyfile(cached_dir / "kafka.classpath", run_dir / "kafka.classpath")
    broker = EmbeddedBroker(run_dir, port=free_port())
    version = kafka_version(classpath)
    console.print(f"starting Kafka {version} (embedded) at {broker.bootstrap} …")
    broker.start()
    try:
        pid: int | None = None
        with contextlib.suppress(OSError, ValueError):
            pid = int((run_dir / "broker" / "broker.pid").read_text(encoding="ascii").strip())
        yield Broker(broker.bootstrap, f"{version}, embedded single-node KRaft broker", pid)
    finally:
        console.print("stopping Kafka …")
        broker.stop()


def create_topics(bootstrap: str, partitions: int, prefix: str) -> dict[str, str]:
    """Topics shaped as onceonly's, named ``<prefix>.*``; the variables that point
    ingest or a worker at them."""
    from onceonly.foundation.kafka import Admin, Connection
    from onceonly.foundation.topics import topic_specs

    names = {
        "ONCEONLY_DELIVERIES_TOPIC": f"{prefix}.deliveries",
        "ONCEONLY_LEDGER_TOPIC": f"{prefix}.replies",
        "ONCEONLY_DEAD_LETTER_TOPIC": f"{prefix}.dead-letters",
        "ONCEONLY_DECISIONS_TOPIC": f"{prefix}.decisions",
    }
    settings = topic_settings(bootstrap, partitions, names)
    Admin(Connection.from_settings(settings)).ensure_topics(topic_specs(settings))
    return names


def topic_settings(
    bootstrap: str, partitions: int, topics: dict[str, str], **more: Any
) -> Settings:
    """Settings naming ``topics`` (as :func:`create_topics` returns them), and ``more``."""
    from onceonly.foundation.settings import Settings

    return Settings(
        kafka_bootstrap=bootstrap,
        partitions=partitions,
        deliveries_topic=topics["ONCEONLY_DELIVERIES_TOPIC"],
        ledger_topic=topics["ONCEONLY_LEDGER_TOPIC"],
        dead_letter_topic=topics["ONCEONLY_DEAD_LETTER_TOPIC"],
        decisions_topic=topics["ONCEONLY_DECISIONS_TOPIC"],
        **more,
    )

"""The benchmarks' processes: the broker, servers under test, their CPU time (whole, and by
thread group: the event loop, librdkafka's threads, other), read from /proc; and Debian's
packages they need (wrk, Go, PostgreSQL), installed where missing."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console

from testkit.apt import APT_GET, one_at_a_time
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


#: the variables that say how to authenticate to an external cluster (SASL, TLS)
SECURITY_VARIABLES = (
    "ONCEONLY_KAFKA_SECURITY_PROTOCOL",
    "ONCEONLY_KAFKA_SASL_MECHANISM",
    "ONCEONLY_KAFKA_SASL_USERNAME",
    "ONCEONLY_KAFKA_SASL_PASSWORD",
    "ONCEONLY_KAFKA_SSL_CA_FILE",
)


def security_env() -> dict[str, str]:
    """This process's Kafka security variables, for the processes a benchmark starts with
    the other ``ONCEONLY_*`` variables left out (a SASL cluster needs them all)."""
    return {name: os.environ[name] for name in SECURITY_VARIABLES if name in os.environ}


def security() -> dict[str, str]:
    """librdkafka's security properties for this process's security variables."""
    from onceonly.foundation.kafka import client_security
    from onceonly.foundation.settings import Settings

    return client_security(Settings.from_env())


@contextlib.contextmanager
def kafka(run_dir: Path) -> Iterator[Broker]:
    """A broker for the run. An :class:`~devstack.broker.EmbeddedBroker` on a free port in
    ``run_dir``, stopped on exit; or the cluster named by ``ONCEONLY_KAFKA_BOOTSTRAP``."""
    external = os.environ.get("ONCEONLY_KAFKA_BOOTSTRAP")
    if external:
        protocol = os.environ.get("ONCEONLY_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
        about = f"external cluster at {external} (ONCEONLY_KAFKA_BOOTSTRAP), {protocol}"
        yield Broker(external, about, None)
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


#: The groups in the order the reports give them.
GROUPS = ("loop", "rdk:main", "rdk:broker", "other")


def thread_group(comm: str, tid: int, pid: int) -> str:
    """The group of thread ``tid`` of process ``pid`` named ``comm``: ``loop`` for the main
    thread (asyncio's loop runs there), ``rdk:main`` for librdkafka's main thread,
    ``rdk:broker`` for each of its broker threads (one per broker and the internal ones),
    ``other`` for the rest (executors, py-spy's, threads of other libraries)."""
    if tid == pid:
        return "loop"
    if comm == "rdk:main":
        return "rdk:main"
    if comm.startswith("rdk:broker"):
        return "rdk:broker"
    return "other"


def parse_stat(text: str) -> tuple[str, float]:
    """(comm, user + system CPU seconds) of one /proc/<pid>/task/<tid>/stat line."""
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    fields = rest.split()
    return comm, (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def thread_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (comm, CPU seconds so far) of each live thread of ``pid``; {} if it is gone."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out[int(task.name)] = parse_stat((task / "stat").read_text(encoding="ascii"))
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return out


def per_delivery_us(
    before: Mapping[int, tuple[str, float]],
    after: Mapping[int, tuple[str, float]],
    pid: int,
    deliveries: float,
) -> dict[str, float]:
    """µs of CPU per delivery by group (:data:`GROUPS`, all present) between two readings of
    :func:`thread_seconds`, and ``total``. A thread read only once counts what it had then
    (from 0 if it started meanwhile; nothing more if it ended)."""
    spent = dict.fromkeys(GROUPS, 0.0)
    for tid in before.keys() | after.keys():
        comm, end = after.get(tid, before.get(tid, ("", 0.0)))
        start = before[tid][1] if tid in before else 0.0
        spent[thread_group(comm, tid, pid)] += max(0.0, end - start)
    if deliveries <= 0:
        return {**dict.fromkeys(spent, float("nan")), "total": float("nan")}
    us = {group: 1e6 * seconds / deliveries for group, seconds in spent.items()}
    us["total"] = sum(us.values())
    return us


def parse_schedstat(text: str) -> float:
    """Seconds spent waiting on a run queue, from a /proc/<pid>/task/<tid>/schedstat line:
    nanoseconds on a CPU, nanoseconds ready but waiting for one, and timeslices run."""
    return int(text.split()[1]) / 1e9


def runqueue_wait_seconds(pid: int | None) -> float:
    """Seconds the main thread of ``pid`` (a server's event loop) has waited for a CPU so
    far; NaN without a pid, once it is gone, or on a kernel without schedstat."""
    if pid is None:
        return float("nan")
    try:
        return parse_schedstat(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text("ascii"))
    except (OSError, ValueError, IndexError):
        return float("nan")


T = TypeVar("T")


def debian_package(package: str, find: Callable[[], T | None], what: str) -> T:
    """What ``find`` finds, Debian's ``package`` installed first as root if need be."""
    found = find()
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise BenchError(
            f"{what} is not installed and this is not root: `sudo apt-get install {package}`"
        )
    console.print(f"installing Debian's {package} package (apt-get) …")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*APT_GET, "install", "-y", "-q", "--no-install-recommends", package]
    with one_at_a_time():
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run([*APT_GET, "update", "-q"], env=env, check=False)
            subprocess.run(install, env=env, check=False)
    found = find()
    if found is None:
        raise BenchError(f"apt-get could not install {package}; see its output above")
    return found


def debian_command(command: str, package: str, *, also: tuple[str, ...] = ()) -> str:
    """The path of ``command`` (or of the first of ``also``, full paths, that exists)."""

    def find() -> str | None:
        return shutil.which(command) or next((p for p in also if os.access(p, os.X_OK)), None)

    return debian_package(package, find, command)

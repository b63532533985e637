"""Server subprocesses of the ingest benchmark, their CPU time, and the machine they run on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import signal
import subprocess
import time
from importlib import metadata
from pathlib import Path
from types import TracebackType

import aiohttp

#: The repository root: servers run from here so that ``-m bench._servers`` resolves.
ROOT = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The benchmark could not run; the message says what to do."""


class ServerProcess:
    """One server under test, in its own process group; stopped on exit, whatever happens."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise BenchError(f"{self.name} is not running")
        return self._process.pid

    def start(self) -> ServerProcess:
        with self.log_path.open("wb") as log:
            # Its own session: a Ctrl-C reaches the benchmark only, which stops the server.
            self._process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    async def wait_ready(self, url: str, timeout_s: float = 30.0) -> None:
        """Wait until ``GET url`` answers 200; fail with the server's log if it exits first."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                if self._process is None or self._process.poll() is not None:
                    code = None if self._process is None else self._process.returncode
                    raise BenchError(
                        f"{self.name} exited during start-up (exit {code}); its output:\n"
                        + self.log_tail()
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"{self.name} did not answer {url} within {timeout_s:g} s; its output:\n"
                        + self.log_tail()
                    )
                await asyncio.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        return "\n".join(text.splitlines()[-lines:]) or "(no output)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``. Idempotent."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._process = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- CPU time


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process (all its threads) so far; ours if ``pid`` is
    None; NaN if it cannot be read."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs; /proc/stat), NaN if unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICKS


class CpuWindow:
    """CPU use of named processes between :meth:`begin` and :meth:`end`, in % of one core,
    and ``other``: what the rest of the machine used meanwhile (other processes, and
    kernel work not charged to ours), which shows whether the figures had the CPUs alone."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self.percent: dict[str, float] = {}
        self._start: dict[str, float] = {}
        self._busy = 0.0
        self._t0 = 0.0

    def begin(self) -> None:
        self._t0 = time.perf_counter()
        self._busy = machine_busy_seconds()
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def end(self) -> None:
        elapsed = time.perf_counter() - self._t0
        self.percent = {
            name: 100 * (cpu_seconds(pid) - self._start[name]) / elapsed
            for name, pid in self.pids.items()
        }
        busy = 100 * (machine_busy_seconds() - self._busy) / elapsed
        self.percent["other"] = max(0.0, busy - sum(self.percent.values()))

    async def measure(self, after_s: float, for_s: float) -> None:
        await asyncio.sleep(after_s)
        self.begin()
        await asyncio.sleep(for_s)
        self.end()


# --------------------------------------------------------------------------- the machine


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


def kafka_version(classpath: str | None) -> str:
    """The broker's Kafka version, read from its jar on the classpath."""
    if classpath:
        found = re.search(r"kafka_2\.13-(\d[\w.\-]*?)\.jar", classpath)
        if found:
            return found.group(1)
    return "unknown"


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
            f"confluent-kafka {_version('confluent-kafka')} (librdkafka {librdkafka})",
        ),
        ("Kafka", kafka),
    ]

"""The one runner of the benchmarks that start a stack, drive a load and write a report:
each is a :class:`Scenario`, and :func:`command` makes its ``python -m`` command; the
machine, versions, load and code its report says the figures were measured on."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any, Generic, TypeVar

import click

from bench._options import OUT, Opt, cli, sized
from bench._procs import ROOT, BenchError, Broker, console, kafka
from bench._report import Section, command_line, sections_body, write_report

Opts = TypeVar("Opts")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Scenario(Generic[Opts, R]):
    """One benchmark: a short definition that :func:`command` runs."""

    name: str  #: the report's: ``<out>/<name>-<date>.md``
    title: str
    options: Sequence[Opt]
    make: Callable[..., Opts]  #: the options' values -> what ``collect`` is handed
    collect: Callable[[Opts, Broker, Path], R]  #: the run, on a broker, in a temporary folder
    #: the report's body, in markdown: or ``sections``, a report with a chart; neither:
    #: the benchmark prints its figures only
    report: Callable[[Opts, R], Sequence[str]] | None = None
    sections: Callable[[Opts, R], Sequence[Section]] | None = None
    smoke: str = ""  #: the help of ``--smoke``, when some options have smoke sizes
    note: str = ""  #: after the command line in a markdown report
    #: more lines of the report's machine table: (results, seconds the run took) -> items
    about: Callable[[R, float], Sequence[tuple[str, str]]] | None = None
    failed: Callable[[R], bool] | None = None  #: exit 1 when it says so (a target not met)

    @property
    def module(self) -> str:
        """The module of ``collect`` as ``python -m`` names it (the report gives the command):
        its import name also when it runs as ``__main__``."""
        spec = getattr(sys.modules[self.collect.__module__], "__spec__", None)
        name = spec.name if spec is not None else self.collect.__module__
        return name.removesuffix(".__main__")

    def run(self, values: dict[str, Any], out: Path, smoke: bool = False) -> R:
        """Make the options, collect on a broker of its own (under :func:`execute`), write
        the report, the machine described in it (the load average and the code are taken at
        the start, as the processes run the code as it is then)."""
        opts = self.make(**sized(values, smoke, self.options))
        load_before, code, began = loadavg(), revision(), time.monotonic()

        def body() -> tuple[R, str]:
            kept: Path | None = getattr(opts, "keep", None)
            if kept is not None:  # a folder the run keeps: its broker's data and the rest
                kept.mkdir(parents=True, exist_ok=True)
                with kafka(kept) as broker:
                    return self.collect(opts, broker, kept), broker.about
            prefix = f"onceonly-bench-{self.name}-"
            with tempfile.TemporaryDirectory(prefix=prefix) as tmp, kafka(Path(tmp)) as broker:
                return self.collect(opts, broker, Path(tmp)), broker.about

        results, kafka_about = execute(body)
        more = self.about(results, time.monotonic() - began) if self.about is not None else ()
        load = f"{load_before} at the start, {loadavg()} at the end"
        items = [
            *machine(kafka_about),
            *more,
            ("code", code),
            ("load average (1, 5, 15 min)", load),
        ]
        if self.sections is not None or self.report is not None:
            sections = self.sections(opts, results) if self.sections is not None else ()
            lines = self.report(opts, results) if self.report else sections_body(sections)
            charts = [s.comparison for s in sections if s.comparison is not None]
            command = f"`{command_line(self.module)}`{self.note}"
            path = write_report(
                out, self.name, self.title, command, lines, items, charts=charts, smoke=smoke
            )
            console.print(f"written to {path}" + (" and its chart" if charts else ""))
        if self.failed is not None and self.failed(results):
            sys.exit(1)
        return results


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def execute(body: Callable[[], T]) -> T:
    """Run a benchmark: SIGTERM stops it as Ctrl-C does (every process it started is
    stopped on the way out), exit 130 then; exit 1 with the message when it cannot run."""
    from onceonly.foundation.errors import OnceOnlyError

    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        return body()
    except KeyboardInterrupt:
        console.print("[red]interrupted: every process, the broker and the database are stopped[/]")
        sys.exit(130)
    except (BenchError, OnceOnlyError, subprocess.SubprocessError) as exc:
        console.print(f"[red]bench: {exc}[/]")
        sys.exit(1)


def command(scenario: Scenario[Any, Any], doc: str) -> click.Command:
    """The benchmark's click command: its options, ``--out`` when it writes a report,
    ``--smoke`` when it has smoke sizes; ``doc`` is its ``--help``."""
    table = [*scenario.options]
    if scenario.report is not None or scenario.sections is not None:
        table.append(OUT)
    if scenario.smoke:
        table.append(Opt("--smoke", help=scenario.smoke, flag=True))

    @cli(table, doc)
    def main(out: Path = Path(), smoke: bool = False, **values: Any) -> None:
        scenario.run(values, out, smoke)

    return main


def whole_run(_results: object, seconds: float) -> list[tuple[str, str]]:
    """The machine table's line of how long the whole run took."""
    return [("whole run", f"{seconds:.0f} s")]


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

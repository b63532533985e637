"""The one runner of the benchmarks that start a stack, drive a load and write a report:
each is a :class:`Scenario`, and :func:`command` makes its ``python -m`` command."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Generic, TypeVar

import click

from bench._options import OUT, Opt, sized, with_options
from bench._procs import BenchError, Broker, console, kafka
from bench._report import Section, command_line, write_markdown, write_report

Opts = TypeVar("Opts")
T = TypeVar("T")
R = TypeVar("R")

HELP = {"help_option_names": ["-h", "--help"]}


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
        from bench._machine import loadavg, machine, revision

        opts = self.make(**sized(values, smoke, self.options))
        load_before, code, began = loadavg(), revision(), time.monotonic()

        def body() -> tuple[R, str]:
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
        if self.sections is not None:
            command = command_line(self.module)
            md, png = write_report(
                self.name, self.title, self.sections(opts, results), items, command, out
            )
            console.print(f"written to {md} and {png.name}")
        elif self.report is not None:
            lines = self.report(opts, results)
            path = write_markdown(
                out, self.name, self.title, self.module, lines, items, smoke=smoke, note=self.note
            )
            console.print(f"written to {path}")
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

    def main(out: Path = Path(), smoke: bool = False, **values: Any) -> None:
        scenario.run(values, out, smoke)

    main.__doc__ = doc
    return click.command(context_settings=HELP)(with_options(table)(main))


def whole_run(_results: object, seconds: float) -> list[tuple[str, str]]:
    """The machine table's line of how long the whole run took."""
    return [("whole run", f"{seconds:.0f} s")]

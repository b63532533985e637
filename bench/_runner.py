"""The one runner of the benchmarks that start a stack, drive a load and write a report.

Each such benchmark is a :class:`Scenario`: its option table, what it makes of the
options, what it runs on a broker of its own (:func:`bench._report.run_on_broker`) and
the report it writes of the results; :func:`command` makes its ``python -m`` command,
with ``--out`` (and ``--smoke`` when its options have smoke sizes).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import click

from bench._options import OUT, Opt, sized, with_options
from bench._procs import Broker, console
from bench._report import Section, command_line, run_on_broker, write_markdown, write_report

Opts = TypeVar("Opts")
R = TypeVar("R")

HELP = {"help_option_names": ["-h", "--help"]}


@dataclass(frozen=True)
class Scenario(Generic[Opts, R]):
    """One benchmark: a short definition that :func:`command` runs."""

    name: str  #: the report's: ``<out>/<name>-<date>.md``
    title: str
    module: str  #: ``python -m <module>``, as the report gives the command
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

    def run(self, values: dict[str, Any], out: Path, smoke: bool = False) -> R:
        """Make the options, collect on a broker of its own, write the report."""
        opts = self.make(**sized(values, smoke, self.options))
        results, items = run_on_broker(
            f"onceonly-bench-{self.name}-",
            lambda broker, work: self.collect(opts, broker, work),
            self.about,
        )
        if self.sections is not None:
            command = command_line(self.module)
            md, png = write_report(
                self.name, self.title, self.sections(opts, results), items, command, out
            )
            console.print(f"written to {md} and {png.name}")
        elif self.report is not None:
            body = self.report(opts, results)
            path = write_markdown(
                out, self.name, self.title, self.module, body, items, smoke=smoke, note=self.note
            )
            console.print(f"written to {path}")
        if self.failed is not None and self.failed(results):
            sys.exit(1)
        return results


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

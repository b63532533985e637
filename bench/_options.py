"""The benchmarks' options: each command's a table of :class:`Opt` rows, and the two option
blocks that ``python -m bench`` shares with ``bench.ingest`` and ``bench.processors``, and the
ingest variants ``bench.ingest_cpu`` compares, ``NAME[@DIR][,VAR=VALUE...]``."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import click

from bench._report import RESULTS_DIR

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Opt:
    """One row of a command's option table: ``click.option(*decls, dest)``, its default
    shown in ``--help``. ``sizes``: ``(full, smoke)`` when the command's ``--smoke`` picks
    the size that was not given (:func:`sized`); the help then names both."""

    decls: str | tuple[str, ...]
    type: Any = None
    default: Any = None
    help: str = ""
    dest: str | None = None
    sizes: tuple[Any, Any] | None = None
    flag: bool = False
    multiple: bool = False
    callback: Callable[[Any, Any, Any], Any] | None = None

    @property
    def key(self) -> str:
        """The name its value is handed under."""
        first = self.decls if isinstance(self.decls, str) else self.decls[0]
        return self.dest or first.split("/")[0].lstrip("-").replace("-", "_")

    def __call__(self, f: F) -> F:
        decls = (self.decls,) if isinstance(self.decls, str) else self.decls
        text = self.help
        if self.sizes is not None:
            text = f"{text} [{self.sizes[0]:g}; smoke {self.sizes[1]:g}]."
        kw: dict[str, Any] = {"is_flag": True} if self.flag else {"default": self.default}
        if self.multiple:
            kw["multiple"] = True
        if self.type is not None:
            kw["type"] = self.type
        if self.callback is not None:
            kw["callback"] = self.callback
        spelled = (*decls, self.dest) if self.dest else decls
        return click.option(*spelled, show_default=True, help=text, **kw)(f)


def with_options(table: Sequence[Opt]) -> Callable[[F], F]:
    """A decorator: every option of ``table``, in its order in ``--help``."""

    def decorate(f: F) -> F:
        for row in reversed(table):
            f = row(f)
        return f

    return decorate


HELP = {"help_option_names": ["-h", "--help"]}


def cli(table: Sequence[Opt], doc: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A decorator: the click command of a function, its options ``table``, ``doc`` its
    ``--help`` (a benchmark's, and a tool's that starts no stack)."""

    def make(f: Callable[..., Any]) -> click.Command:
        f.__doc__ = doc
        return click.command(context_settings=HELP)(with_options(table)(f))

    return make


def sized(values: dict[str, Any], smoke: bool, table: Sequence[Opt]) -> dict[str, Any]:
    """``values`` (a command's options), each option of ``table`` with sizes that was not
    given set to its full size, or its smoke one with ``--smoke``."""
    for row in table:
        if row.sizes is not None and values.get(row.key) is None:
            values[row.key] = row.sizes[1] if smoke else row.sizes[0]
    return values


#: What a benchmark whose options need no class of their own is handed: ``opts.<key>``
#: for each row of its table (:attr:`Opt.key`).
Values = SimpleNamespace


#: ``--out`` (also spelled ``--results-dir``): where the report is written.
OUT = Opt(
    ("--out", "--results-dir"),
    click.Path(file_okay=False, path_type=Path),
    RESULTS_DIR,
    "Where the report is written.",
    dest="out",
)


def with_partitions(**values: Any) -> Values:
    """The options' values, and ``partitions``: ONCEONLY_PARTITIONS as the worker reads it
    (the topics are made with this many)."""
    from onceonly.foundation.settings import Settings

    return Values(partitions=Settings.from_env().partitions, **values)


def connection_counts(text: str) -> tuple[int, ...]:
    """``"64,128"`` as ``(64, 128)``: distinct counts of 1-256, ascending; a
    click.BadParameter saying what is wrong otherwise."""
    try:
        counts = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from None
    if not all(1 <= count <= 256 for count in counts):
        raise click.BadParameter(f"{text!r}: each count of connections must be 1-256")
    return tuple(counts)


#: The values of :data:`INGEST_OPTIONS` and of :data:`PROCESSOR_OPTIONS` (``python -m bench``
#: hands both the values of both tables).
IngestOptions = ProcessorOptions = Values


Int, Float = click.IntRange, click.FloatRange

INGEST_OPTIONS = (
    Opt(
        "--duration",
        Float(1, 60),
        10.0,
        "Ingest: measured seconds per closed loop (wrk's run is this, rounded up to whole "
        "seconds, plus one), and of the open loop.",
        dest="duration_s",
    ),
    Opt(
        "--warmup",
        Float(0, 30),
        2.0,
        "Ingest: unmeasured seconds of wrk before each closed loop (rounded up to whole "
        "seconds; 0 for none).",
        dest="warmup_s",
    ),
    #: each server's closed loop at each count in turn, its peak the fastest: a server whose
    #: latency has a floor (ingest's 5 ms linger) is bound by connections / latency, not by
    #: its CPU, when there are too few
    Opt(
        "--concurrency",
        None,
        "64,128",
        "Ingest: keep-alive connections of wrk, comma-separated (1-256 each): every server's "
        "closed loop at each in turn, its peak the fastest; the open loops use the largest.",
        callback=lambda _ctx, _param, value: connection_counts(value),
    ),
    Opt(
        "--pool",
        Int(100, 200_000),
        30_000,
        "Ingest: distinct signed deliveries per closed loop (reused in turn if the loop "
        "sends more).",
    ),
    Opt(
        "--broker-warmup",
        Float(0, 60),
        8.0,
        "Ingest: seconds of produce load on the broker before any server is measured "
        "(JIT warm-up).",
        dest="broker_warmup_s",
    ),
    Opt(
        "--pg-pool", Int(1, 100), 16, "Ingest: asyncpg connections of the PostgreSQL baseline (d)."
    ),
    Opt(
        "--wrk-threads",
        Int(1, 64),
        1,
        "Ingest: wrk's threads (the connections are shared out among them).",
    ),
    #: the p99 of one 10 s open loop on this shared machine varied from 14 to 270 ms between
    #: runs of one code, so the target is judged on the median run's and every run is shown
    Opt(
        "--target-runs",
        Int(1, 20),
        3,
        "Ingest: open loops at half of c's peak; the p99 target is judged on the median run's.",
    ),
    Opt(
        "--rounds",
        Int(1, 20),
        3,
        "Ingest: closed loops of every server in turn, this many times; each server's figures "
        "are those of its median round (by deliveries/s).",
    ),
)

PROCESSOR_OPTIONS = (
    Opt(
        "--events",
        Int(100, 1_000_000),
        20_000,
        "Processors: AgentMail events for the throughput phases (1) and (2).",
    ),
    Opt(
        "--dedupe-entries",
        Int(1, 10_000_000),
        1_000_000,
        "Processors: distinct events the worker records before its RSS is read (3).",
    ),
    Opt("--skip-rss", help="Processors: skip (3); (4) then restarts with less state.", flag=True),
    Opt(
        "--rss-budget",
        Float(10, 7200),
        3600.0,
        "Processors: seconds (3) may take; if the worker has not recorded --dedupe-entries by "
        "then, the RSS is read at what it has and extrapolated, and the report says so.",
        dest="rss_budget_s",
    ),
    Opt(
        "--log-level",
        click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        "INFO",
        "Processors: ONCEONLY_LOG_LEVEL of the worker (INFO is its default), and the plain "
        "agent's.",
    ),
    Opt(
        "--takeover-entries",
        Int(0, 100_000_000),
        1_000_000,
        "Processors: dedupe entries the worker holds when it is SIGKILLed and an empty worker "
        "takes over (6), topped up if (3) left fewer; 0 skips (6).",
    ),
    Opt(
        "--takeover-only",
        help="Processors: only fill a worker with --takeover-entries and run (6) "
        "(make bench-scale).",
        flag=True,
    ),
    Opt(
        "--takeover-fill",
        click.Choice(["worker", "changelog"]),
        "worker",
        "Processors: how (6)'s entries are made: recorded by the worker from Stripe events, "
        "or written straight to its events changelog as the worker writes them (sizes the "
        "worker would take hours to record; make bench-scale).",
    ),
    Opt(
        "--takeover-standby/--no-takeover-standby",
        None,
        True,
        "Processors: run (6)'s standby takeover after the cold one.",
    ),
)


_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Variant:
    """One ingest to measure: ``code`` is a checkout's root (None: this one)."""

    name: str
    code: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


def parse_variant(spec: str) -> Variant:
    """The :class:`Variant` of ``spec``; ValueError saying what is wrong with it."""
    head, *assignments = spec.split(",")
    name, at, code = head.partition("@")
    if not _NAME.match(name):
        raise ValueError(f"variant {spec!r}: a name of letters, digits and _.+- comes first")
    if at and not code:
        raise ValueError(f"variant {spec!r}: '@' needs a directory after it")
    env: dict[str, str] = {}
    for assignment in assignments:
        variable, eq, value = assignment.partition("=")
        if not eq or not _VARIABLE.match(variable):
            raise ValueError(f"variant {spec!r}: {assignment!r} is not VARIABLE=VALUE")
        env[variable] = value
    return Variant(name, Path(code).resolve() if code else None, env)


def ingest_argv(python: str, variant: Variant) -> list[str]:
    """The command that runs ``onceonly ingest`` from ``variant``'s checkout: that
    checkout's packages first on the path (they shadow this one's editable install)."""
    if variant.code is None:
        return [python, "-m", "onceonly", "ingest"]
    root = str(variant.code)
    program = (
        "import os, runpy, sys; "
        f"os.chdir({root!r}); sys.path.insert(0, {root!r}); "
        "sys.argv = ['onceonly', 'ingest']; "
        "runpy.run_module('onceonly', run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", program]

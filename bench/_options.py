"""The benchmarks' shared options: one click option block per benchmark, and the results dir."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from bench._report import RESULTS_DIR

# --------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class IngestOptions:
    duration_s: float
    warmup_s: float
    #: wrk's keep-alive connections: each server's closed loop runs at each of these in
    #: turn, its peak the fastest (a server whose latency has a floor, as ingest's 5 ms
    #: linger, is bound by connections / latency, not by its CPU, when there are too few)
    concurrency: tuple[int, ...]
    pool: int
    broker_warmup_s: float
    pg_pool: int
    wrk_threads: int = 1
    #: open loops at half of c's peak: the p99 of one 10 s run on this shared machine
    #: varied from 14 to 270 ms between runs of one code, so the target is judged on the
    #: median run's and every run is shown
    target_runs: int = 3
    #: closed loops of every server, in turn, this many times; each server's figures are
    #: its median round's
    rounds: int = 3


@dataclass(frozen=True, slots=True)
class ProcessorOptions:
    events: int
    dedupe_entries: int
    skip_rss: bool
    rss_budget_s: float
    log_level: str
    takeover_entries: int = 1_000_000
    takeover_only: bool = False
    #: "worker": the worker records the entries; "changelog": written to its changelog
    takeover_fill: str = "worker"
    takeover_standby: bool = True


F = TypeVar("F", bound=Callable[..., Any])


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


def option(*decls: str, help: str = "", **kw: Any) -> Callable[[F], F]:
    """``click.option`` as the benchmarks use it: the default shown in ``--help``."""
    return click.option(*decls, show_default=True, help=help, **kw)


Spec = tuple[tuple[str, ...], dict[str, Any]]


def _spec(*decls: str, **kw: Any) -> Spec:
    return decls, kw


def _connections(_ctx: object, _param: object, value: str) -> tuple[int, ...]:
    return connection_counts(value)


_INGEST_OPTIONS = (
    _spec(
        "--duration",
        type=click.FloatRange(1, 60),
        default=10.0,
        help="Ingest: measured seconds per closed loop (wrk's run is this, rounded up to "
        "whole seconds, plus one), and of the open loop.",
    ),
    _spec(
        "--warmup",
        type=click.FloatRange(0, 30),
        default=2.0,
        help="Ingest: unmeasured seconds of wrk before each closed loop (rounded up to whole "
        "seconds; 0 for none).",
    ),
    _spec(
        "--concurrency",
        default="64,128",
        callback=_connections,
        help="Ingest: keep-alive connections of wrk, comma-separated (1-256 each): every "
        "server's closed loop at each in turn, its peak the fastest; the open loops use the "
        "largest.",
    ),
    _spec(
        "--pool",
        type=click.IntRange(100, 200_000),
        default=30_000,
        help="Ingest: distinct signed deliveries per closed loop (reused in turn if the "
        "loop sends more).",
    ),
    _spec(
        "--broker-warmup",
        type=click.FloatRange(0, 60),
        default=8.0,
        help="Ingest: seconds of produce load on the broker before any server is measured "
        "(JIT warm-up).",
    ),
    _spec(
        "--pg-pool",
        type=click.IntRange(1, 100),
        default=16,
        help="Ingest: asyncpg connections of the PostgreSQL baseline (d).",
    ),
    _spec(
        "--wrk-threads",
        type=click.IntRange(1, 64),
        default=1,
        help="Ingest: wrk's threads (the connections are shared out among them).",
    ),
    _spec(
        "--target-runs",
        type=click.IntRange(1, 20),
        default=3,
        help="Ingest: open loops at half of c's peak; the p99 target is judged on the "
        "median run's.",
    ),
    _spec(
        "--rounds",
        type=click.IntRange(1, 20),
        default=3,
        help="Ingest: closed loops of every server in turn, this many times; each server's "
        "figures are those of its median round (by deliveries/s).",
    ),
)

#: in the order of :class:`ProcessorOptions`' fields
_PROCESSOR_OPTIONS = (
    _spec(
        "--events",
        type=click.IntRange(100, 1_000_000),
        default=20_000,
        help="Processors: AgentMail events for the throughput phases (1) and (2).",
    ),
    _spec(
        "--dedupe-entries",
        type=click.IntRange(1, 10_000_000),
        default=1_000_000,
        help="Processors: distinct events the worker records before its RSS is read (3).",
    ),
    _spec(
        "--skip-rss", is_flag=True, help="Processors: skip (3); (4) then restarts with less state."
    ),
    _spec(
        "--rss-budget",
        type=click.FloatRange(10, 7200),
        default=3600.0,
        help="Processors: seconds (3) may take; if the worker has not recorded "
        "--dedupe-entries by then, the RSS is read at what it has and extrapolated, and the "
        "report says so.",
    ),
    _spec(
        "--log-level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO",
        help="Processors: ONCEONLY_LOG_LEVEL of the worker (INFO is its default), and the "
        "plain agent's.",
    ),
    _spec(
        "--takeover-entries",
        type=click.IntRange(0, 100_000_000),
        default=1_000_000,
        help="Processors: dedupe entries the worker holds when it is SIGKILLed and an empty "
        "worker takes over (6), topped up if (3) left fewer; 0 skips (6).",
    ),
    _spec(
        "--takeover-only",
        is_flag=True,
        help="Processors: only fill a worker with --takeover-entries and run (6) "
        "(make bench-scale).",
    ),
    _spec(
        "--takeover-fill",
        type=click.Choice(["worker", "changelog"]),
        default="worker",
        help="Processors: how (6)'s entries are made: recorded by the worker from Stripe "
        "events, or written straight to its events changelog as the worker writes them "
        "(sizes the worker would take hours to record; make bench-scale).",
    ),
    _spec(
        "--takeover-standby/--no-takeover-standby",
        default=True,
        help="Processors: run (6)'s standby takeover after the cold one.",
    ),
)


def _bundle(specs: Sequence[Spec], make: Callable[..., Any], key: str) -> Callable[[F], F]:
    """A decorator: the options of ``specs``, whose values (in their order) are handed to
    ``f`` as one ``key=make(*values)``."""
    names = [click.Option(decls, **kw).name for decls, kw in specs]

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = [kwargs.pop(name) for name in names if name is not None]
            return f(*args, **{key: make(*values)}, **kwargs)

        for decls, kw in reversed(specs):
            wrapper = option(*decls, **kw)(wrapper)
        return wrapper  # type: ignore[return-value]

    return decorate


#: the ingest benchmark's options, handed to ``f`` as ``ingest=IngestOptions(...)``
ingest_options = _bundle(_INGEST_OPTIONS, IngestOptions, "ingest")
#: the processor benchmark's options, handed to ``f`` as ``processors=ProcessorOptions(...)``
processor_options = _bundle(_PROCESSOR_OPTIONS, ProcessorOptions, "processors")


def sized(values: dict[str, Any], smoke: bool, **sizes: tuple[Any, Any]) -> dict[str, Any]:
    """``values`` (a command's options), each of ``sizes`` that was not given set to its
    ``(full, smoke)`` size: the smoke one with ``--smoke``."""
    for name, (full, small) in sizes.items():
        if values[name] is None:
            values[name] = small if smoke else full
    return values


def partitions() -> int:
    """ONCEONLY_PARTITIONS as the worker reads it (the topics are made with this many)."""
    from onceonly.foundation.settings import Settings

    return Settings.from_env().partitions


def out_option(f: F) -> F:
    """``--out`` (also spelled ``--results-dir``): where the report is written."""
    return option(
        "--out",
        "--results-dir",
        "out",
        type=click.Path(file_okay=False, path_type=Path),
        default=RESULTS_DIR,
        help="Where the report is written.",
    )(f)

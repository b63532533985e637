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


_INGEST_OPTIONS = (
    click.option(
        "--duration",
        type=click.FloatRange(1, 60),
        default=10.0,
        show_default=True,
        help="Ingest: measured seconds per closed loop (wrk's run is this, rounded up to "
        "whole seconds, plus one), and of the open loop.",
    ),
    click.option(
        "--warmup",
        type=click.FloatRange(0, 30),
        default=2.0,
        show_default=True,
        help="Ingest: unmeasured seconds of wrk before each closed loop (rounded up to whole "
        "seconds; 0 for none).",
    ),
    click.option(
        "--concurrency",
        default="64,128",
        show_default=True,
        callback=lambda _ctx, _param, value: connection_counts(value),
        help="Ingest: keep-alive connections of wrk, comma-separated (1-256 each): every "
        "server's closed loop at each in turn, its peak the fastest; the open loops use the "
        "largest.",
    ),
    click.option(
        "--pool",
        type=click.IntRange(100, 200_000),
        default=30_000,
        show_default=True,
        help="Ingest: distinct signed deliveries per closed loop (reused in turn if the "
        "loop sends more).",
    ),
    click.option(
        "--broker-warmup",
        type=click.FloatRange(0, 60),
        default=8.0,
        show_default=True,
        help="Ingest: seconds of produce load on the broker before any server is measured "
        "(JIT warm-up).",
    ),
    click.option(
        "--pg-pool",
        type=click.IntRange(1, 100),
        default=16,
        show_default=True,
        help="Ingest: asyncpg connections of the PostgreSQL baseline (d).",
    ),
    click.option(
        "--wrk-threads",
        type=click.IntRange(1, 64),
        default=1,
        show_default=True,
        help="Ingest: wrk's threads (the connections are shared out among them).",
    ),
    click.option(
        "--target-runs",
        type=click.IntRange(1, 20),
        default=3,
        show_default=True,
        help="Ingest: open loops at half of c's peak; the p99 target is judged on the "
        "median run's.",
    ),
    click.option(
        "--rounds",
        type=click.IntRange(1, 20),
        default=3,
        show_default=True,
        help="Ingest: closed loops of every server in turn, this many times; each server's "
        "figures are those of its median round (by deliveries/s).",
    ),
)

_PROCESSOR_OPTIONS = (
    click.option(
        "--events",
        type=click.IntRange(100, 1_000_000),
        default=20_000,
        show_default=True,
        help="Processors: AgentMail events for the throughput phases (1) and (2).",
    ),
    click.option(
        "--dedupe-entries",
        type=click.IntRange(1, 10_000_000),
        default=1_000_000,
        show_default=True,
        help="Processors: distinct events the worker records before its RSS is read (3).",
    ),
    click.option(
        "--rss-budget",
        type=click.FloatRange(10, 7200),
        default=3600.0,
        show_default=True,
        help="Processors: seconds (3) may take; if the worker has not recorded "
        "--dedupe-entries by then, the RSS is read at what it has and extrapolated, and the "
        "report says so.",
    ),
    click.option(
        "--skip-rss", is_flag=True, help="Processors: skip (3); (4) then restarts with less state."
    ),
    click.option(
        "--takeover-entries",
        type=click.IntRange(0, 100_000_000),
        default=1_000_000,
        show_default=True,
        help="Processors: dedupe entries the worker holds when it is SIGKILLed and an empty "
        "worker takes over (6), topped up if (3) left fewer; 0 skips (6).",
    ),
    click.option(
        "--takeover-only",
        is_flag=True,
        help="Processors: only fill a worker with --takeover-entries and run (6) "
        "(make bench-scale).",
    ),
    click.option(
        "--takeover-fill",
        type=click.Choice(["worker", "changelog"]),
        default="worker",
        show_default=True,
        help="Processors: how (6)'s entries are made: recorded by the worker from Stripe "
        "events, or written straight to its events changelog as the worker writes them "
        "(sizes the worker would take hours to record; make bench-scale).",
    ),
    click.option(
        "--takeover-standby/--no-takeover-standby",
        default=True,
        show_default=True,
        help="Processors: run (6)'s standby takeover after the cold one.",
    ),
    click.option(
        "--log-level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO",
        show_default=True,
        help="Processors: ONCEONLY_LOG_LEVEL of the worker (INFO is its default), and the "
        "plain agent's.",
    ),
)


def _apply(options: Sequence[Callable[[F], F]], f: F) -> F:
    for option in reversed(options):
        f = option(f)
    return f


def ingest_options(f: F) -> F:
    """The ingest benchmark's options, handed to ``f`` as ``ingest=IngestOptions(...)``."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        duration: float,
        warmup: float,
        concurrency: tuple[int, ...],
        pool: int,
        broker_warmup: float,
        pg_pool: int,
        wrk_threads: int,
        target_runs: int,
        rounds: int,
        **kwargs: Any,
    ) -> Any:
        opts = IngestOptions(
            duration,
            warmup,
            concurrency,
            pool,
            broker_warmup,
            pg_pool,
            wrk_threads,
            target_runs,
            rounds,
        )
        return f(*args, ingest=opts, **kwargs)

    return _apply(_INGEST_OPTIONS, wrapper)  # type: ignore[return-value]


def processor_options(f: F) -> F:
    """The processor benchmark's options, handed to ``f`` as ``processors=ProcessorOptions``."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        events: int,
        dedupe_entries: int,
        rss_budget: float,
        skip_rss: bool,
        log_level: str,
        takeover_entries: int,
        takeover_only: bool,
        takeover_fill: str,
        takeover_standby: bool,
        **kwargs: Any,
    ) -> Any:
        opts = ProcessorOptions(
            events,
            dedupe_entries,
            skip_rss,
            rss_budget,
            log_level.upper(),
            takeover_entries,
            takeover_only,
            takeover_fill,
            takeover_standby,
        )
        return f(*args, processors=opts, **kwargs)

    return _apply(_PROCESSOR_OPTIONS, wrapper)  # type: ignore[return-value]


def results_dir_option(f: F) -> F:
    return click.option(
        "--results-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=RESULTS_DIR,
        show_default=True,
        help="Where the report (markdown and PNG) is written.",
    )(f)

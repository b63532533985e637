"""``onceonly replay``: copy a range of the deliveries topic back onto it, of any size.

The copy itself (waiting on the broker, what was acknowledged, what is left) is in
:mod:`onceonly.operations.replay` and the Kafka seam; this module parses, shows progress, turns
Ctrl-C and SIGTERM into a clean stop, and prints where a replay stopped.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from onceonly.cli.startup import settings_from_env

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from onceonly.foundation.kafka import TopicRange


#: how often a replay whose output is not a terminal (a log, a pipe) prints its progress
PROGRESS_EVERY_S = 5.0


@contextlib.contextmanager
def _progress(console: Console, total: int, what: str) -> Iterator[Callable[[int], None]]:
    """``advance(n)``: a rich bar on a terminal; elsewhere a line every PROGRESS_EVERY_S."""
    from rich.progress import Progress

    if console.is_terminal:
        with Progress(console=console) as bar:
            task = bar.add_task(what, total=total)
            yield lambda n: bar.advance(task, n)
        return
    done, printed = 0, time.monotonic()

    def advance(n: int) -> None:
        nonlocal done, printed
        done += n
        if time.monotonic() - printed >= PROGRESS_EVERY_S:
            printed = time.monotonic()
            console.print(f"{what}: {done:,} of {total:,} records ({done / total:.0%})")

    yield advance


@contextlib.contextmanager
def _stop_on_signal() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set the event, for the work to stop at its next step and say
    where, instead of ending the process mid-way."""
    stopped = threading.Event()
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda *_: stopped.set()) for s in wanted}
    try:
        yield stopped
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _ranges(ctx: click.Context, param: click.Parameter, value: str | None) -> list[TopicRange]:
    from onceonly.foundation.kafka._reader import parse_ranges

    try:
        return parse_ranges(value) if value else []
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.command()
@click.option("--from-offset", type=int, help="Replay from this offset of each partition.")
@click.option(
    "--from-time",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]),
    help="Replay from the first record at or after this ISO 8601 time (UTC if no zone).",
)
@click.option("--partition", type=int, help="Only this partition.")
@click.option(
    "--resume",
    metavar="RANGES",
    callback=_ranges,
    help="Go on with a replay that stopped: the ranges it printed (partition:from-to,...).",
)
@click.option("--dry-run", is_flag=True, help="Show the plan, replay nothing.")
def replay(
    from_offset: int | None,
    from_time: datetime | None,
    partition: int | None,
    resume: list[TopicRange],
    dry_run: bool,
) -> None:
    """Reprocess a range of the deliveries topic: failed events retry, nothing is answered twice.

    Records are produced again with the onceonly-replay header; running workers take them
    in order. The worker group's offsets are not moved, so workers need not stop. Any
    size: it waits for the broker when its queue is full, and shows its progress (a bar, or
    a line every 5 s when the output is not a terminal). Ctrl-C or SIGTERM stops it once
    what is in flight is acknowledged; it then prints where it stopped and the --resume
    command that goes on from there (exit status 130; 1 if the broker failed it).
    """
    from rich.console import Console

    from onceonly.foundation.kafka import Connection
    from onceonly.operations import replay as replays

    if resume and partition is not None:
        raise click.UsageError("--resume names its partitions: leave --partition out")
    settings = settings_from_env()
    if from_time is not None and from_time.tzinfo is None:
        from_time = from_time.replace(tzinfo=UTC)
    connection, topic = Connection.from_settings(settings), settings.deliveries_topic
    plans = replays.plan(
        connection,
        topic,
        from_offset=from_offset,
        from_time=from_time,
        partition=partition,
        resume=resume,
    )
    console, total = Console(), sum(p.count for p in plans)
    # from the plan on, Ctrl-C stops the copy where it is and says where (not a traceback)
    with _stop_on_signal() as stopped:
        console.print(_plan_table(topic, plans))
        if dry_run or total == 0:
            console.print("dry run: nothing replayed" if dry_run else "nothing to replay")
            return
        with _progress(console, total, "replaying") as advance:
            done = replays.replay(connection, topic, plans, advance=advance, stop=stopped.is_set)
    if not done.left:
        console.print(
            f"replayed {done.sent} records (ticks skipped); workers will process them in order"
        )
        return
    why = "Ctrl-C or SIGTERM" if stopped.is_set() else done.why
    console.print(_stopped_note(done.sent, done.left, why), soft_wrap=True)
    sys.exit(130 if stopped.is_set() else 1)


def _plan_table(topic: str, plans: list[TopicRange]) -> Table:
    from rich.table import Table

    table = Table("partition", "from", "to", "count", title=f"replay of {topic}")
    for step in plans:
        table.add_row(str(step.partition), str(step.start), str(step.end), str(step.count))
    table.add_row("all", "", "", str(sum(p.count for p in plans)))
    return table


def _stopped_note(sent: int, left: list[TopicRange], why: str | None) -> str:
    """Where a replay stopped, and the command that goes on from there."""
    from onceonly.foundation.kafka._reader import format_ranges

    return (
        f"replay stopped ({why}): {sent:,} records were copied and acknowledged, "
        f"{sum(r.count for r in left):,} are left, from the first record whose copy was not "
        "acknowledged (one copied twice is harmless: dedupe and the reply ledger stop "
        f"repeats). To go on from there:\n  onceonly replay --resume {format_ranges(left)}"
    )

"""``onceonly index``: build the operator index from the topics, and follow them."""

from __future__ import annotations

import signal
from types import FrameType

import click

from onceonly.cli.startup import settings_from_env


@click.command()
@click.option("--follow", is_flag=True, help="Keep reading what is written, until stopped.")
@click.option(
    "--poll-s",
    type=click.FloatRange(0.05),
    default=1.0,
    show_default=True,
    help="With --follow: seconds between passes that found nothing new.",
)
def index(follow: bool, poll_s: float) -> None:
    """Read the topics into the index at ONCEONLY_INDEX_DIR, from where it stopped.

    Without --follow: one pass to the topics' current ends, then how far behind it is.
    With it: pass after pass until SIGINT/SIGTERM (what `onceonly approvals`, `onceonly
    trace`, `onceonly dead-letters` and `onceonly catch-up` answer from; run one per index
    directory)."""
    from onceonly.foundation.kafka import Connection
    from onceonly.operations import index as operator_index

    settings = settings_from_env()
    if settings.index_dir is None:
        raise click.ClickException("set ONCEONLY_INDEX_DIR to the directory the index lives in")
    store = operator_index.IndexStore.writer(settings.index_dir)

    def stop(signum: int, frame: FrameType | None) -> None:
        # each list is written with its offset in one batch: stopping between any two
        # bytecodes loses nothing (the next start resumes from the last batch written)
        raise SystemExit(0)

    def report(done: operator_index.Pass) -> None:
        count = sum(done.read.values())
        if count or not follow:
            rate = count / done.seconds if done.seconds > 0 else 0.0
            click.echo(f"indexed {count} records in {done.seconds:.1f} s ({rate:,.0f}/s)")

    try:
        if follow:
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
            click.echo(f"following the topics into {settings.index_dir}", err=True)
            operator_index.follow(
                settings, store, poll_s=poll_s, keep_going=lambda: True, on_pass=report
            )
        else:
            connection = Connection.from_settings(settings)
            report(operator_index.one_pass(connection, settings, store))
            click.echo(operator_index.freshness(connection, settings, store).line())
    finally:
        store.close()

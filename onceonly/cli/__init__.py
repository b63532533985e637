"""The ``onceonly`` command. Each subcommand reads the settings once and passes them down."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import structlog

from onceonly.cli.approvals import approvals
from onceonly.cli.dead_letters import dead_letters
from onceonly.cli.index import index
from onceonly.cli.replay import replay
from onceonly.cli.startup import run_until_signal, settings_from_env
from onceonly.foundation.errors import ConfigError, OnceOnlyError
from onceonly.foundation.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

    from onceonly.operations import catchup

log = structlog.get_logger("onceonly")


def _settings() -> Settings:
    return settings_from_env()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onceonly")
def main() -> None:
    """onceonly: verify webhooks, record them durably in Kafka, act on each exactly once.

    Configuration comes from ONCEONLY_* environment variables (see the README).
    """


@main.command()
def topics() -> None:
    """Create the topics onceonly needs; fail on a topic with the wrong shape."""
    from onceonly.foundation.kafka import Admin, Connection
    from onceonly.foundation.topics import topic_specs

    settings = _settings()
    admin = Admin(Connection.from_settings(settings))
    for status in admin.ensure_topics(topic_specs(settings)):
        verb = "created" if status.created else "ok"
        click.echo(
            f"{verb:8} {status.name} ({status.partitions} partitions, {status.replicas} replicas)"
        )


@main.command()
@click.option(
    "--one-of",
    type=click.Path(file_okay=False, path_type=Path),
    hidden=True,
    help="Internal: one of ONCEONLY_INGEST_PROCESSES, started by their parent.",
)
def ingest(one_of: Path | None) -> None:
    """Run the webhook ingest service (aiohttp) in the foreground.

    With ONCEONLY_INGEST_PROCESSES > 1: that many processes on the one port, under this one.
    """
    from onceonly.ingest.app import serve
    from onceonly.ingest.processes import run_processes

    settings = _settings()
    if one_of is None and settings.ingest_processes > 1:
        sys.exit(run_processes(settings))
    run_until_signal(serve(settings, one_of=one_of))


@main.command()
def worker() -> None:
    """Run one processing worker (faust): dedupe, reorder, reply once; /ops on its web port."""
    from onceonly.operations import trace
    from onceonly.operations.ops_page import OpsSources, ops_pages
    from onceonly.processors.runtime.worker import run_worker

    settings = _settings()
    run_worker(settings, pages=ops_pages(OpsSources(trace=trace, skips=trace.recent_skips)))


def _duration(value: str | None) -> timedelta | None:
    """--look-back: an ISO 8601 duration (P3D, PT36H) or seconds, above zero."""
    if value is None:
        return None
    from pydantic import TypeAdapter, ValidationError

    try:
        parsed = TypeAdapter(timedelta).validate_python(value)
    except ValidationError as exc:
        raise click.BadParameter(f"{value!r} is no duration: write P3D, PT36H or seconds") from exc
    if parsed <= timedelta(0):
        raise click.BadParameter(f"{value!r}: the look-back must be above zero")
    return parsed


@main.command(name="catch-up")
@click.option("--inbox", "inbox_id", help="The AgentMail inbox to catch up.")
@click.option("--nylas-grant", "nylas_grant", help="The Nylas grant (id) to catch up instead.")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]),
    help="List messages after this time (default: the look-back, or further back to the "
    "inbox's last message recorded before then).",
)
@click.option(
    "--look-back",
    "look_back",
    help="How far back to list without --since (ISO 8601 duration such as P3D, or "
    "seconds); overrides ONCEONLY_CATCHUP_LOOKBACK (default: the provider's horizon, "
    "7 days for AgentMail, 5 for Nylas).",
)
@click.option("--wait-s", default=120.0, show_default=True, help="How long to wait for replies.")
def catch_up(
    inbox_id: str | None,
    nylas_grant: str | None,
    since: datetime | None,
    look_back: str | None,
    wait_s: float,
) -> None:
    """List an inbox's messages after a time and answer the unanswered ones, once.

    Without --since it lists from the look-back, or from the inbox's last message recorded
    in the ledger before then if that is earlier: an outage that ended within the look-back
    is listed whole, whatever was answered since. It says which window it listed."""
    from onceonly.operations import catchup

    if (inbox_id is None) == (nylas_grant is None):
        raise click.UsageError("name one of --inbox (AgentMail) or --nylas-grant (Nylas)")
    override = _duration(look_back)
    settings = _settings()
    try:
        source = catchup.source_for(settings, inbox_id, nylas_grant)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    from rich.console import Console

    now = datetime.now(UTC)
    back = catchup.look_back_for(source.provider.name, override or settings.catchup_lookback)
    console = Console()
    with catchup.ledger_for(settings) as found:
        window = catchup.window_for(found.ledger, source.account, now, since=since, look_back=back)
        if window is None:
            asyncio.run(source.provider.sender.aclose())
            raise click.ClickException(
                f"the ledger ({settings.ledger_topic}) records no message of {source.label}, "
                "so nothing says where its mail began to be answered: say where to start with "
                f"--since ({found.source})"
            )
        summary = _listed(console, settings, source, window.start, found.ledger)
    with console.status("waiting for the worker to answer"):
        done = catchup.wait_for_answers(settings, summary, wait_s)
    console.print(catchup.window_line(source.label, window, now), soft_wrap=True)
    console.print(f"the ledger: {found.source}", soft_wrap=True)
    console.print(
        f"found {summary.found}, answered {done}, "
        f"skipped {summary.skipped_sent_by_agent + summary.skipped_answered} "
        f"({summary.skipped_sent_by_agent} sent by the agent, "
        f"{summary.skipped_answered} already answered), "
        f"past the ledger's retention {summary.skipped_past_retention}, "
        f"pending {len(summary.fed) - done}"
    )


def _listed(
    console: Console,
    settings: Settings,
    source: catchup.Source,
    start: datetime,
    answered: catchup.Ledger,
) -> catchup.Summary:
    """Catch-up's own work, with a progress bar of the messages listed so far."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from onceonly.operations import catchup

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console) as progress:
            what = f"listing {source.label} after {start.isoformat()}"
            task = progress.add_task(what, total=None)

            def step(s: catchup.Summary) -> None:
                progress.update(
                    task,
                    completed=s.found,
                    description=f"{what}: {s.found} listed, {len(s.fed)} fed, "
                    f"{s.skipped_answered + s.skipped_sent_by_agent} skipped",
                )

            return asyncio.run(
                catchup.feed_unanswered(settings, source, start, answered, progress=step)
            )
    except OnceOnlyError as exc:  # the mail API refused or could not be reached
        raise click.ClickException(f"could not list the messages of {source.label}: {exc}") from exc


@main.command()
def lag() -> None:
    """Consumer lag of the worker group, per partition of the deliveries topic."""
    from rich.console import Console
    from rich.table import Table

    from onceonly.foundation.kafka import Connection, consumer_lag

    settings = _settings()
    rows = consumer_lag(
        Connection.from_settings(settings), settings.app_id, settings.deliveries_topic
    )
    table = Table(
        "topic", "partition", "log end", "committed", "lag", title=f"group {settings.app_id}"
    )
    for row in rows:
        committed = "-" if row.committed is None else str(row.committed)
        table.add_row(row.topic, str(row.partition), str(row.end), committed, str(row.lag))
    table.add_row("all", "", "", "", str(sum(r.lag for r in rows)))
    Console().print(table)


@main.command()
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the trace as JSON, for scripts.")
def trace(ident: str, as_json: bool) -> None:
    """What happened to one message: ID is a message id, an event id or a reply key.

    Every delivery of it (partition, offset, time, replayed or not), the dedupe verdicts,
    when its thread's buffer released it, the ledger record and the dead letters that
    name it. Reads the topics; needs no worker. Exits 1 if no topic names ID.
    """
    import json

    from rich.console import Console

    from onceonly.operations import trace as traces

    settings = _settings()
    found, source = _trace(settings, ident)
    if found is None:
        raise click.ClickException(
            f"no delivery, ledger record or dead letter names {ident!r} (in "
            f"{settings.deliveries_topic}, {settings.ledger_topic}, "
            f"{settings.dead_letter_topic}); give a message id, an event id or a reply key. "
            f"Deliveries are kept 7 days; {source}"
        )
    if as_json:
        out = {**traces.to_json(found), "answered_by": source}
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    Console().print(traces.render(found))
    click.echo(source)


def _trace(settings: Settings, ident: str) -> tuple[Any, str]:
    """The trace from the index when one is built, else from the topics; and which."""
    from onceonly.operations import index
    from onceonly.operations import trace as traces

    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.trace(settings, ident)
        return answer.value, answer.line()
    return traces.find(settings, ident), f"answered by scanning the topics ({reason})"


main.add_command(approvals)
main.add_command(dead_letters)
main.add_command(index)
main.add_command(replay)


def run() -> None:
    """Entry point: map our errors to a one-line message and exit status 1."""
    try:
        main(standalone_mode=True)
    except OnceOnlyError as exc:
        click.echo(f"onceonly: {exc}", err=True)
        sys.exit(1)

"""The ``onceonly`` command. Each subcommand reads the settings once and passes them down."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import structlog

from foundation.errors import ConfigError, OnceOnlyError
from foundation.settings import Settings
from onceonly.send import send
from onceonly.startup import settings_from_env
from onceonly.up import up

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
@click.option("--fetch-only", is_flag=True, help="Fetch the Kafka jars with Maven, then exit.")
@click.option(
    "--nodes",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Nodes (broker + controller, one JVM each) on the bootstrap port and the ports after it.",
)
@click.option(
    "--sasl",
    is_flag=True,
    help="Clients and brokers speak SASL_PLAINTEXT with SCRAM: the user is "
    "ONCEONLY_KAFKA_SASL_USERNAME / _PASSWORD, created when the storage is formatted.",
)
def broker(fetch_only: bool, nodes: int, sasl: bool) -> None:
    """Run a local Kafka (KRaft) broker or cluster in the foreground, from the official jars."""
    from devstack.jars import kafka_classpath
    from devstack.up import port_of, run_foreground, single_broker

    settings = _settings()
    run_dir = settings.run_dir.resolve()
    if fetch_only:
        classpath = kafka_classpath(run_dir)
        click.echo(f"kafka jars ready ({classpath.count(':') + 1} on the classpath)")
        return
    if not settings.is_local_broker:
        raise click.ClickException(
            f"ONCEONLY_KAFKA_BOOTSTRAP={settings.kafka_bootstrap} names an external cluster; "
            "nothing local is started"
        )
    port = port_of(settings.kafka_bootstrap)
    if sasl and nodes == 1:
        raise click.UsageError("--sasl runs a cluster: give --nodes 3")
    if nodes == 1:
        sys.exit(run_foreground(single_broker(run_dir, port, settings.broker_heap_mb)))
    from devstack.cluster import CLUSTER_HEAP_MB, LocalCluster, scram_user

    heap_mb = min(settings.broker_heap_mb, CLUSTER_HEAP_MB)
    user = scram_user(settings) if sasl else None
    cluster = LocalCluster(run_dir, port=port, nodes=nodes, heap_mb=heap_mb, user=user)
    sys.exit(run_foreground(cluster))


@main.command()
def topics() -> None:
    """Create the topics onceonly needs; fail on a topic with the wrong shape."""
    from foundation.kafka import Admin, client_security
    from foundation.topics import topic_specs

    settings = _settings()
    admin = Admin(settings.kafka_bootstrap, security=client_security(settings))
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
    from devstack.up import run_until_signal
    from ingest.app import serve
    from ingest.processes import run_processes

    settings = _settings()
    if one_of is None and settings.ingest_processes > 1:
        sys.exit(run_processes(settings))
    run_until_signal(serve(settings, one_of=one_of))


@main.command()
def worker() -> None:
    """Run one processing worker (faust): dedupe, reorder, reply once; /ops on its web port."""
    from operations import trace
    from operations.ops_page import OpsSources, ops_pages
    from processors.worker import run_worker

    settings = _settings()
    run_worker(settings, pages=ops_pages(OpsSources(trace=trace, skips=trace.recent_skips)))


@main.command()
@click.option("--from-offset", type=int, help="Replay from this offset of each partition.")
@click.option(
    "--from-time",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]),
    help="Replay from the first record at or after this ISO 8601 time (UTC if no zone).",
)
@click.option("--partition", type=int, help="Only this partition.")
@click.option("--dry-run", is_flag=True, help="Show the plan, replay nothing.")
def replay(
    from_offset: int | None, from_time: datetime | None, partition: int | None, dry_run: bool
) -> None:
    """Reprocess a range of the deliveries topic: failed events retry, nothing is answered twice.

    Records are produced again with the onceonly-replay header; running workers take them
    in order. The worker group's offsets are not moved, so workers need not stop.
    """
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from foundation.kafka import client_security
    from operations import replay as replays

    settings = _settings()
    if from_time is not None and from_time.tzinfo is None:
        from_time = from_time.replace(tzinfo=UTC)
    plans = replays.plan(
        settings.kafka_bootstrap,
        settings.deliveries_topic,
        from_offset=from_offset,
        from_time=from_time,
        partition=partition,
        security=client_security(settings),
    )
    table = Table(
        "partition", "from", "to", "count", title=f"replay of {settings.deliveries_topic}"
    )
    for step in plans:
        table.add_row(str(step.partition), str(step.start), str(step.end), str(step.count))
    total = sum(p.count for p in plans)
    table.add_row("all", "", "", str(total))
    console = Console()
    console.print(table)
    if dry_run or total == 0:
        console.print("dry run: nothing replayed" if dry_run else "nothing to replay")
        return
    with Progress(console=console) as progress:
        task = progress.add_task("replaying", total=total)
        sent = replays.replay(
            settings.kafka_bootstrap,
            settings.deliveries_topic,
            plans,
            advance=lambda n: progress.advance(task, n),
            security=client_security(settings),
        )
    console.print(f"replayed {sent} records (ticks skipped); workers will process them in order")


@main.command(name="catch-up")
@click.option("--inbox", "inbox_id", help="The AgentMail inbox to catch up.")
@click.option("--nylas-grant", "nylas_grant", help="The Nylas grant (id) to catch up instead.")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]),
    help="List messages after this time (default: the inbox's last recorded reply).",
)
@click.option("--wait-s", default=120.0, show_default=True, help="How long to wait for replies.")
def catch_up(
    inbox_id: str | None, nylas_grant: str | None, since: datetime | None, wait_s: float
) -> None:
    """List an inbox's messages after a time and answer the unanswered ones, once."""
    from foundation.kafka import client_security
    from operations import catchup

    if (inbox_id is None) == (nylas_grant is None):
        raise click.UsageError("name one of --inbox (AgentMail) or --nylas-grant (Nylas)")
    settings = _settings()
    try:
        account, label, lister = catchup.lister_for(settings, inbox_id, nylas_grant)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    from rich.console import Console
    from rich.progress import Progress

    ledger = catchup.read_ledger(
        settings.kafka_bootstrap, settings.ledger_topic, security=client_security(settings)
    )
    start = since or catchup.last_answered(ledger, account)
    if start is None:
        raise click.ClickException(
            f"no reply is recorded for {label}: say where to start with --since"
        )
    start = start if start.tzinfo else start.replace(tzinfo=UTC)
    console = Console()
    try:
        with Progress(console=console) as progress:
            task = progress.add_task(f"listing {label} after {start.isoformat()}", total=None)
            summary = asyncio.run(
                catchup.feed_unanswered(
                    settings, lister, start, ledger, progress=lambda: progress.advance(task)
                )
            )
    except OnceOnlyError as exc:  # the mail API refused or could not be reached
        raise click.ClickException(f"could not list the messages of {label}: {exc}") from exc
    with console.status("waiting for the worker to answer"):
        answered = catchup.wait_for_answers(settings, summary, wait_s)
    console.print(
        f"found {summary.found}, answered {answered}, "
        f"skipped {summary.skipped_sent_by_agent + summary.skipped_answered} "
        f"({summary.skipped_sent_by_agent} sent by the agent, "
        f"{summary.skipped_answered} already answered), "
        f"pending {len(summary.fed) - answered}"
    )


@main.command()
def lag() -> None:
    """Consumer lag of the worker group, per partition of the deliveries topic."""
    from rich.console import Console
    from rich.table import Table

    from foundation.kafka import client_security, consumer_lag

    settings = _settings()
    rows = consumer_lag(
        settings.kafka_bootstrap,
        settings.app_id,
        settings.deliveries_topic,
        security=client_security(settings),
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

    from operations import trace as traces

    settings = _settings()
    found = traces.find(settings, ident)
    if found is None:
        raise click.ClickException(
            f"no delivery, ledger record or dead letter names {ident!r} (in "
            f"{settings.deliveries_topic}, {settings.ledger_topic}, "
            f"{settings.dead_letter_topic}); give a message id, an event id or a reply key. "
            "Deliveries are kept 7 days"
        )
    if as_json:
        click.echo(json.dumps(traces.to_json(found), ensure_ascii=False, indent=2))
        return
    Console().print(traces.render(found))


@main.group(name="dead-letters")
def dead_letters() -> None:
    """Inspect and retry what the worker could not do."""


@dead_letters.command(name="list")
def dead_letters_list() -> None:
    """Show each dead letter: its id (offset), time, key, events and reason."""
    from rich.console import Console
    from rich.table import Table

    from foundation.kafka import client_security
    from operations.replay import dead_letters as read

    settings = _settings()
    table = Table("id", "at", "key", "events", "reason", "state", title=settings.dead_letter_topic)
    letters = read(
        settings.kafka_bootstrap, settings.dead_letter_topic, security=client_security(settings)
    )
    for letter in letters:
        events = ", ".join(e.event_id for e in letter.envelopes)
        table.add_row(
            str(letter.offset),
            str(letter.letter.get("at", "")),
            str(letter.letter.get("key", "")),
            events,
            str(letter.letter.get("reason", "")),
            "open" if letter.open else f"retried {letter.retried_at}",
        )
    Console().print(table)
    click.echo(f"{len(letters)} dead letter(s), {sum(1 for x in letters if x.open)} open")


@dead_letters.command(name="retry")
@click.argument("ids", nargs=-1, type=int)
def dead_letters_retry(ids: tuple[int, ...]) -> None:
    """Send the open dead letters (or these ids) through the same reply-once path again."""
    from foundation.kafka import client_security
    from operations.replay import dead_letters as read
    from operations.replay import retry_dead_letters

    settings = _settings()
    letters = read(
        settings.kafka_bootstrap, settings.dead_letter_topic, security=client_security(settings)
    )
    # no ids: the open letters; ids: those, retried before or not
    chosen = [letter for letter in letters if (letter.offset in ids if ids else letter.open)]
    missing = set(ids) - {letter.offset for letter in letters}
    if missing:
        raise click.ClickException(
            f"no dead letter with id {sorted(missing)}; see dead-letters list"
        )
    sent = retry_dead_letters(
        settings.kafka_bootstrap,
        settings.deliveries_topic,
        chosen,
        dead_letter_topic=settings.dead_letter_topic,
        mac_key=settings.envelope_mac_key,
        security=client_security(settings),
    )
    click.echo(f"re-sent {sent} event(s) from {len(chosen)} dead letter(s) as a replay")


main.add_command(send)
main.add_command(up)


def run() -> None:
    """Entry point: map our errors to a one-line message and exit status 1."""
    try:
        main(standalone_mode=True)
    except OnceOnlyError as exc:
        click.echo(f"onceonly: {exc}", err=True)
        sys.exit(1)

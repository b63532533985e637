"""``python -m devstack send``: sign and post sample deliveries, then say what became of each."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path

import click

from onceonly.cli.startup import settings_from_env
from onceonly.foundation.providers import ALL
from onceonly.foundation.settings import Settings


def signing_secrets(settings: Settings) -> dict[str, str]:
    """Route to secret, as ingest has them; AgentMail falls back to ``python -m devstack up``'s dev
    secret."""
    from devstack.dev_secret import read_dev_secret
    from onceonly.foundation.providers import configured

    out = {route: secret for route, (_, secret) in configured(settings).items()}
    if "agentmail" not in out and (dev := read_dev_secret(settings.run_dir)) is not None:
        out["agentmail"] = dev
    return out


@click.command()
@click.option(
    "--provider",
    default="agentmail",
    show_default=True,
    help=f"One of {', '.join(ALL)}.",
)
@click.option("--url", help="Ingest's base URL (default: ONCEONLY_INGEST_HOST and _PORT).")
@click.option("--count", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--file",
    "payload_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Send this JSON body instead of the sample.",
)
@click.option(
    "--wait",
    "wait_s",
    default=30.0,
    show_default=True,
    help="Seconds to wait at most for every delivery's outcome (it ends as soon as all are known).",
)
def send(
    provider: str, url: str | None, count: int, payload_file: Path | None, wait_s: float
) -> None:
    """Sign and post sample events to a running ingest, then report what happened to each.

    By default: an AgentMail message.received delivered COUNT times, out of order with a
    newer message of the same thread sent first.
    """
    from devstack.send_watch import Topics, watch
    from onceonly.foundation.kafka import Connection, KafkaAdapterError, following
    from onceonly.operations.outcomes import Sent, outcomes
    from onceonly.processors.mail.registry import dry_runs
    from testkit.samples import SampleError, post_all, samples, secret_for

    settings = settings_from_env()
    base = url or f"http://{settings.ingest_host}:{settings.ingest_port}"
    try:
        secret = secret_for(provider, signing_secrets(settings))
        body = payload_file.read_bytes() if payload_file is not None else None
        batch = samples(provider, secret, copies=count, body=body, now=datetime.now(UTC))
    except (SampleError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc
    topics = Topics.of(settings)
    with contextlib.ExitStack() as stack:
        try:
            # made before the post: it reads from where each topic ends now, so everything
            # written about these deliveries, and nothing older
            follower = stack.enter_context(
                following(Connection.from_settings(settings), topics.all())
            )
        except KafkaAdapterError as exc:
            raise click.ClickException(f"nothing posted: the topics cannot be read: {exc}") from exc
        posted = asyncio.run(post_all(base, batch))
        sent = [
            Sent(p.sample.label, p.status, p.detail, p.sample.event_id, p.sample.message_id)
            for p in posted
        ]
        for item in sent:
            click.echo(f"posted     {item.label}: HTTP {item.status or 'no answer'}")
        try:
            watched = watch(sent, follower, topics, wait_s=wait_s)
        except KafkaAdapterError as exc:
            raise click.ClickException(
                f"posted, but what became of the deliveries cannot be read: {exc}"
            ) from exc
    dry_run = any(entry.name == provider for entry in dry_runs(settings))
    for outcome in outcomes(sent, watched.replies, dry_run=dry_run, seen=watched.seen):
        click.echo(f"{outcome.label}: {outcome.verdict}")
        if outcome.reply_text:
            click.echo(f"    reply: {outcome.reply_text.strip()[:300]}")
    if not watched.known:
        click.echo(f"(not every outcome was known within --wait {wait_s:g} s: what was by then)")

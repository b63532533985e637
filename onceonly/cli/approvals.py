"""``onceonly approvals``: list the drafts awaiting a person, approve (or edit) or reject one.

The decision goes to the partition's owner like every other (:mod:`onceonly.operations.approvals`):
the command prints what became of it and the reply's state, and exits 1 when it was
refused (the reply is not a draft any more: already sent, rejected, superseded) or when
no worker applied it within ``--wait``.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
from pathlib import Path

import click

from onceonly.cli.startup import settings_from_env
from onceonly.schemas.approval import Action


def _maker() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


@click.group()
def approvals() -> None:
    """Drafts awaiting a person (ONCEONLY_APPROVAL): list, approve, reject."""


@approvals.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per draft.")
def approvals_list(as_json: bool) -> None:
    """The drafts awaiting a decision, oldest first: key, age, reason, thread, text."""
    from datetime import UTC, datetime

    from onceonly.operations.approvals import waiting_drafts

    found = waiting_drafts(settings_from_env())
    waiting, source = found.value, found.source
    now = datetime.now(UTC)
    for record in waiting:
        if as_json:
            row = {
                "key": record.key,
                "thread_key": record.thread_key,
                "message_id": record.message_id,
                "drafted_at": record.created_at.isoformat(),
                "reason": record.reason,
                "text": record.reply_text,
            }
            click.echo(json.dumps(row, ensure_ascii=False))
            continue
        age = int((now - record.created_at).total_seconds())
        click.echo(f"{record.key}  {age}s  {record.thread_key}  reason: {record.reason}")
        click.echo("    " + (record.reply_text or "").replace("\n", "\n    "))
    if not as_json:
        click.echo(f"{len(waiting)} draft(s) awaiting approval")
    # with --json, stdout stays one draft per line: where the answer came from goes to stderr
    click.echo(source, err=as_json)


def _decide(key: str, action: Action, by: str | None, wait: float, **kw: str | None) -> None:
    from onceonly.operations.approvals import Status, decide, producer, reply_finder

    settings = settings_from_env()
    outcome = asyncio.run(
        decide(
            reply_finder(settings),
            producer(settings),
            key,
            action,
            by or _maker(),
            wait_s=wait,
            **kw,
        )
    )
    click.echo(json.dumps(outcome.to_json(), ensure_ascii=False))
    click.echo(outcome.answered_by, err=True)  # the reply's record: from the index, or a scan
    if outcome.status is Status.REFUSED:
        raise click.ClickException(f"decision refused: {outcome.detail}")
    if outcome.status is Status.WAITING:
        raise click.ClickException(
            f"decision {outcome.decision_id} recorded but not applied within {wait:g} s: "
            "is a worker running? it is applied when the thread's partition is next read"
        )


_by = click.option("--by", help="Who decides (recorded with the reply); default user@host.")
_wait = click.option(
    "--wait",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the worker to apply the decision.",
)


@approvals.command()
@click.argument("key")
@click.option(
    "--text-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Send this file's text in place of the draft's (an edit).",
)
@_by
@_wait
def approve(key: str, text_file: Path | None, by: str | None, wait: float) -> None:
    """Approve the draft KEY (as it is, or edited with --text-file): it is sent once."""
    text = text_file.read_text(encoding="utf-8") if text_file is not None else None
    _decide(key, Action.APPROVE, by, wait, text=text)


@approvals.command()
@click.argument("key")
@click.option("--reason", required=True, help="Why: recorded with the declined reply.")
@_by
@_wait
def reject(key: str, reason: str, by: str | None, wait: float) -> None:
    """Reject the draft KEY: nothing is sent; the ledger records it declined with the reason."""
    _decide(key, Action.REJECT, by, wait, reason=reason)

"""``onceonly dead-letters``: list, retry and re-admit what the worker could not do.

A retry closes a letter only when all it held was sent again and acknowledged by the
broker; every letter it leaves open is printed on stderr with the reason, and the
command exits 1. The decisions are in :mod:`onceonly.schemas.dead_letter` and
:mod:`onceonly.operations.replay`; this module parses and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from onceonly.cli.startup import settings_from_env
from onceonly.foundation.settings import Settings

if TYPE_CHECKING:
    from onceonly.operations.letters import Letters
    from onceonly.operations.replay import DeadLetter, RetryReport


def _letters(settings: Settings, ids: tuple[int, ...] = ()) -> Letters:
    """From the operator index when one is built, else the whole topic (it says which)."""
    from onceonly.operations.letters import find_letters

    found = find_letters(settings, ids)
    click.echo(found.source, err=True)
    return found


def _chosen(letters: list[DeadLetter], ids: tuple[int, ...]) -> list[DeadLetter]:
    """No ids: the open letters; ids: those, retried before or not."""
    missing = set(ids) - {letter.offset for letter in letters}
    if missing:
        raise click.ClickException(
            f"no dead letter with id {sorted(missing)}; see onceonly dead-letters list"
        )
    return [letter for letter in letters if (letter.offset in ids if ids else letter.open)]


def _report(report: RetryReport, verb: str) -> None:
    click.echo(
        f"{verb} {report.events} event(s) from {len(report.sent)} dead letter(s) as a replay"
    )
    for letter, why in report.left_open:
        click.echo(f"dead letter {letter} left open: {why}", err=True)
    if report.left_open:
        raise click.ClickException(
            f"{len(report.left_open)} dead letter(s) left open, each with the reason above"
        )


@click.group(name="dead-letters")
def dead_letters() -> None:
    """Inspect, retry and re-admit what the worker could not do."""


@dead_letters.command(name="list")
def dead_letters_list() -> None:
    """Show each dead letter: its id (offset), time, key, events, reason and state.

    From the operator index (ONCEONLY_INDEX_DIR) only the open letters are listed."""
    from rich.console import Console
    from rich.table import Table

    from onceonly.operations.replay import missing_secret
    from onceonly.schemas.dead_letter import resendable

    settings = settings_from_env()
    table = Table("id", "at", "key", "events", "reason", "state", title=settings.dead_letter_topic)
    found = _letters(settings)
    letters = found.shown()
    for letter in letters:
        table.add_row(
            str(letter.offset),
            str(letter.letter.get("at", "")),
            str(letter.letter.get("key", "")),
            ", ".join(letter.event_ids),
            str(letter.letter.get("reason", "")),
            "open" if letter.open else f"retried {letter.retried_at}",
        )
    Console().print(table)
    if found.complete:
        click.echo(f"{len(letters)} dead letter(s), {len(found.open)} open")
    else:
        click.echo(f"{len(letters)} open dead letter(s) (the index lists the open ones)")
    key = settings.envelope_mac_key
    for letter in (x for x in letters if x.open):
        held = resendable(letter.letter, key)
        if isinstance(held, str):
            why = held.replace("<id>", str(letter.offset))
            click.echo(f"dead letter {letter.offset}: a retry leaves it open: {why}")
    needed = missing_secret(found.letters, found.open, key)
    if needed is not None:
        click.echo(f"a retry from this shell would be refused: {needed}")


@dead_letters.command(name="retry")
@click.argument("ids", nargs=-1, type=int)
def dead_letters_retry(ids: tuple[int, ...]) -> None:
    """Send the open dead letters (or these ids) through the same reply-once path again.

    A letter is closed only when all it held reached the broker. With
    ONCEONLY_ENVELOPE_SECRET (the worker's, needed when the worker checks MACs) only
    envelopes whose MAC verifies are sent: a letter planted on the dead-letter topic is
    not. Letters left open are printed on stderr with the reason; the exit status is 1.
    """
    from onceonly.foundation.kafka import Connection
    from onceonly.operations.replay import missing_secret, retry_dead_letters

    settings = settings_from_env()
    letters = _letters(settings, ids).letters
    chosen = _chosen(letters, ids)
    refusal = missing_secret(letters, chosen, settings.envelope_mac_key)
    if refusal is not None:
        raise click.ClickException(f"retry refused, nothing was sent: {refusal}")
    report = retry_dead_letters(
        Connection.from_settings(settings),
        settings.deliveries_topic,
        chosen,
        dead_letter_topic=settings.dead_letter_topic,
        mac_key=settings.envelope_mac_key,
    )
    _report(report, "re-sent")


@dead_letters.command(name="readmit")
@click.argument("ids", nargs=-1, type=int, required=True)
@click.option(
    "--previous-secret-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding the ONCEONLY_ENVELOPE_SECRET used before a rotation.",
)
@click.option(
    "--vouch",
    is_flag=True,
    help="Send what these letters hold even when no secret verifies it: only letters "
    "you have read (onceonly trace) and know to be genuine.",
)
def dead_letters_readmit(
    ids: tuple[int, ...], previous_secret_file: Path | None, vouch: bool
) -> None:
    """Re-admit what these letters hold after ONCEONLY_ENVELOPE_SECRET was set or rotated.

    Each envelope, or the deliveries record a bad_mac letter names, whose MAC verifies
    under the previous secret (--previous-secret-file) is signed with
    ONCEONLY_ENVELOPE_SECRET and sent again, as a retry sends. Records written before any
    secret carry no MAC: nothing tells them from forged ones, so they are sent only with
    --vouch. Letters left open are printed on stderr with the reason; the exit status is 1.
    """
    from onceonly.foundation.kafka import Connection
    from onceonly.operations.replay import readmit_dead_letters

    settings = settings_from_env()
    current = settings.envelope_mac_key
    if current is None:
        raise click.ClickException(
            "readmit signs with ONCEONLY_ENVELOPE_SECRET: set it to the worker's secret "
            "(and give the one before it with --previous-secret-file, after a rotation)"
        )
    previous = None
    if previous_secret_file is not None:
        previous = previous_secret_file.read_text().strip().encode() or None
        if previous is None:
            raise click.UsageError(f"{previous_secret_file} is empty: it should hold a secret")
    chosen = _chosen(_letters(settings, ids).letters, ids)
    report = readmit_dead_letters(
        Connection.from_settings(settings),
        settings.deliveries_topic,
        chosen,
        current=current,
        previous=previous,
        vouch=vouch,
        dead_letter_topic=settings.dead_letter_topic,
    )
    _report(report, "re-admitted")

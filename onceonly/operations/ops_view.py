"""What the operator page shows, as small values built by pure functions.

:mod:`onceonly.operations.ops_page` reads the topics and serves the page; this module decides what
each section says (rows, health sentences, who may retry what), so all of it is tested
without a broker or a browser.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import SecretStr

from onceonly.foundation.kafka import PartitionLag
from onceonly.operations.replay import DeadLetter, RetryReport
from onceonly.processors.health import WebhookHealth

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Read(Generic[T]):
    """One section's data, or why it could not be read."""

    value: T | None = None
    error: str | None = None
    source: str | None = None  #: what answered (the index, how far behind; or a scan)


@dataclass(frozen=True, slots=True)
class LetterRow:
    id: int  #: the letter's offset, as ``onceonly dead-letters`` names it
    at: str
    check: str
    reason: str
    key: str
    messages: tuple[str, ...]  #: each envelope's message id, else its event id
    record: str  #: where a record that was not an envelope lies ("" for the others)
    retried_at: str | None  #: None: open


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class TraceView:
    ident: str
    text: str | None  #: None: nothing names the id


@dataclass(frozen=True, slots=True)
class Health:
    status: str  #: ``ok``, ``bad`` or ``unknown`` (the CSS class too)
    text: str


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str


@dataclass(frozen=True)
class OpsView:
    app_id: str
    writable: bool
    webhook: Health
    letters: Read[list[LetterRow]]
    lag: Read[list[PartitionLag]]
    skips: Read[Table] | None  #: None: no skip source
    trace_available: bool
    trace: Read[TraceView] | None = None  #: None: nothing looked up
    notice: str | None = None
    refusal: Refusal | None = None
    #: today's model usage per tenant (onceonly.operations.costs); None: not read
    usage: Read[Table] | None = None
    #: the drafts awaiting a person (onceonly.operations.approvals_view.DraftRow); None: not read
    drafts: Read[list[Any]] | None = None


def _entries(body: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    """A letter's list of objects (anyone may write to the topic: anything else is none)."""
    found = body.get(name)
    return [e for e in found if isinstance(e, Mapping)] if isinstance(found, list) else []


def letter_row(letter: DeadLetter) -> LetterRow:
    body = letter.letter
    envelopes = [*_entries(body, "envelopes"), *_entries(body, "envelopes_omitted")]
    messages = tuple(str(e.get("message_id") or e.get("event_id", "")) for e in envelopes)
    where = body.get("offset")  # a record that was not an envelope: where it lies
    record = "" if where is None else f"partition {body.get('partition')} offset {where}"
    return LetterRow(
        id=letter.offset,
        at=str(body.get("at", "")),
        check=str(body.get("check", "")),
        reason=str(body.get("reason", "")),
        key=str(body.get("key", "")),
        messages=messages,
        record=record,
        retried_at=letter.retried_at,
    )


def letter_rows(letters: Sequence[DeadLetter]) -> list[LetterRow]:
    """The letters as rows, newest first."""
    return [letter_row(x) for x in sorted(letters, key=lambda x: x.offset, reverse=True)]


def _as_dict(item: object) -> Mapping[str, object]:
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    if isinstance(item, Mapping):
        return {str(k): v for k, v in item.items()}
    return {"skip": item}


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def skip_table(skips: Sequence[object]) -> Table:
    """The skips as a table: a dataclass's fields (or a mapping's keys) are the columns."""
    dicts = [_as_dict(skip) for skip in skips]
    columns = list(dict.fromkeys(name for d in dicts for name in d))
    rows = tuple(tuple(_cell(d.get(name)) for name in columns) for d in dicts)
    return Table(tuple(columns), rows)


def _ago(then: float, now: float) -> str:
    return f"read {max(0, round(now - then))} s ago"


def webhook_health(health: WebhookHealth, now: float) -> Health:
    """What the worker last read of the watched AgentMail webhook, in a sentence."""
    name = health.webhook_id
    if not name:
        return Health(
            "unknown", "not watched: set ONCEONLY_AGENTMAIL_WEBHOOK_ID to the webhook's id"
        )
    if health.enabled is None or health.checked_at is None:
        if health.error:
            return Health("bad", f"could not read webhook {name}: {health.error}")
        return Health("unknown", f"webhook {name} has not been read yet")
    failed = f"; the last read failed: {health.error}" if health.error else ""
    if not health.enabled:
        return Health(
            "bad",
            f"webhook {name} is DISABLED: deliveries have stopped and missed events will not "
            f"be redelivered; re-enable it, then run onceonly catch-up "
            f"({_ago(health.checked_at, now)}{failed})",
        )
    return Health("ok", f"webhook {name} is enabled ({_ago(health.checked_at, now)}{failed})")


def retried_notice(rows: Sequence[LetterRow], letter_id: int | None) -> str | None:
    """After a retry: what happened to the letter, as the topic now says."""
    for row in rows:
        if row.id == letter_id and row.retried_at is not None:
            return (
                f"dead letter {row.id} retried at {row.retried_at}: its events were sent "
                "through the pipeline again; the reply ledger still stops anything already sent"
            )
    return None


def given_token(field: object, authorization: str | None) -> str | None:
    """The token a request carries: the form field ``token``, else a Bearer header."""
    if isinstance(field, str) and field:
        return field
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def authorize(expected: SecretStr | None, given: str | None) -> Refusal | None:
    """None when a retry may go ahead; else why not (compared in constant time)."""
    if expected is None:
        return Refusal(
            403,
            "retry refused: this page is read-only; set ONCEONLY_OPS_TOKEN on the worker "
            "to allow retries",
        )
    if not given:
        return Refusal(403, "retry refused: a retry needs the operator token (ONCEONLY_OPS_TOKEN)")
    # a header that is not UTF-8 reaches us surrogate-escaped: compare its very bytes
    wanted = expected.get_secret_value().encode()
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), wanted):
        return Refusal(403, "retry refused: that is not the operator token")
    return None


def choose_letter(letters: Sequence[DeadLetter], letter_id: int) -> DeadLetter | Refusal:
    """The open letter a retry names, or why it cannot be retried from the page."""
    for letter in letters:
        if letter.offset == letter_id:
            if letter.open:
                return letter
            return Refusal(
                409,
                f"dead letter {letter_id} was already retried at {letter.retried_at}; "
                f"to send it again run onceonly dead-letters retry {letter_id}",
            )
    return Refusal(404, f"no dead letter with id {letter_id}")


def trace_ident(query: Mapping[str, str]) -> str | None:
    ident = query.get("trace", "").strip()
    return ident or None


#: the most digits an id (a Kafka offset, below 2**63) may have
MAX_ID_DIGITS = 19


def parse_id(text: str) -> int | None:
    """A letter id from a URL: ASCII digits, at most :data:`MAX_ID_DIGITS` (None: not one)."""
    if not (0 < len(text) <= MAX_ID_DIGITS and text.isascii() and text.isdigit()):
        return None
    return int(text)


def int_param(query: Mapping[str, str], name: str) -> int | None:
    return parse_id(query.get(name, ""))


def not_a_letter(text: str) -> Refusal:
    """The refusal of a retry whose id cannot be a letter's (never echoes a long one)."""
    shown = text if len(text) <= MAX_ID_DIGITS else f"{text[:MAX_ID_DIGITS]}..."
    return Refusal(404, f"no dead letter with id {shown}: an id is an offset, see the list")


def retry_refusal(letter_id: int, report: RetryReport) -> Refusal | None:
    """Why a retry from the page did not close the letter (None: it was sent again)."""
    for letter, why in report.held:
        if letter == letter_id:
            return Refusal(409, f"dead letter {letter_id} was not retried and stays open: {why}")
    for letter, why in report.failed:
        if letter == letter_id:
            return Refusal(503, f"dead letter {letter_id} stays open: {why}")
    return None

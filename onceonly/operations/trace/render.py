"""A trace for people (rich, or plain text) and for scripts (JSON)."""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from onceonly.operations.trace.model import DeliveryTrace, LedgerTrace, Skip, Trace
from onceonly.schemas.ledger import ReplyRecord, ReplyState, Usage


def _plain(value: Any) -> Any:
    """Dataclasses, enums and times as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def skip_to_json(skip: Skip) -> dict[str, Any]:
    data: dict[str, Any] = _plain(skip)
    return data


def to_json(trace: Trace) -> dict[str, Any]:
    """The whole trace, with the summaries (``outcome``, ``answered``, ``reply_text``)."""
    data: dict[str, Any] = _plain(trace)
    data["outcome"] = trace.outcome
    data["answered"] = trace.answered
    data["reply_text"] = trace.reply_text
    data["trace_ids"] = list(trace.trace_ids)
    for delivery, out in zip(trace.deliveries, data["deliveries"], strict=True):
        out["outcome"] = delivery.outcome
    return data


def _t(moment: datetime | None, *, year: bool = True) -> str:
    """A time in UTC to the millisecond, without the zone (the tables say UTC)."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime(f"{'%Y-' if year else ''}%m-%d %H:%M:%S.%f")[:-3]


def _deliveries(deliveries: tuple[DeliveryTrace, ...]) -> Table:
    table = Table(
        title="deliveries (times: month-day, UTC)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for name in ("p:offset", "written", "event", "type", "replay", "held", "released"):
        table.add_column(name, no_wrap=name in ("written", "held", "released"))
    table.add_column("dedupe")
    table.add_column("outcome")
    for d in deliveries:
        verdict = d.verdict if d.verdict_stage is None else f"{d.verdict} ({d.verdict_stage})"
        table.add_row(
            f"{d.partition}:{d.offset}",
            _t(d.at, year=False),
            d.event_id,
            d.event_type,
            "yes" if d.replay else "no",
            _t(d.held_at, year=False),
            _t(d.released_at, year=False),
            verdict,
            d.outcome,
        )
    return table


def approval_rows(record: ReplyRecord) -> list[tuple[str, str]]:
    """A draft's rows: what the writer drafted, the decision, who made it and when."""
    approval = record.approval
    if approval is None:
        if record.state is ReplyState.AWAITING:
            return [("draft", f"awaiting a decision since {_t(record.created_at)}")]
        return []
    decided = f"{approval.verdict.value} by {approval.by} at {_t(approval.at)}"
    drafted = approval.draft_text if approval.draft_text is not None else record.reply_text
    rows = [("draft", drafted or "-"), ("decision", decided)]
    if record.state is ReplyState.SENT:
        rows.append(("sent text", record.reply_text or "-"))
    return rows


def _ledger(entry: LedgerTrace) -> Table:
    record = entry.record
    table = Table(
        show_header=False, title=f"ledger {record.key}", title_justify="left", box=box.SIMPLE
    )
    rows = [
        ("state", record.state.value),
        ("message", record.message_id),
        ("text", record.reply_text or "-"),
        ("sent id", record.sent_message_id or "-"),
        ("attempts", str(record.attempts)),
        ("last error", record.error or "-"),
        ("covered by", record.covered_by or "-"),
        ("reason", record.reason or "-"),
        ("cost", _cost(record.usage)),
        ("history", " → ".join(f"{c.state.value} {_t(c.at)}" for c in entry.history)),
    ]
    if entry.removed_at is not None:
        rows.append(("removed", f"{_t(entry.removed_at)} by the ledger's retention (history kept)"))
    if entry.covering is not None:
        rows.append(
            ("covering reply", f"{entry.covering.state.value}: {entry.covering.reply_text}")
        )
    rows.extend(approval_rows(record))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _cost(usage: Usage | None) -> str:
    if usage is None:
        return "-"
    return f"{usage.model}: {usage.input_tokens} in + {usage.output_tokens} out tokens"


def render(trace: Trace) -> RenderableType:
    """The trace as rich renderables: a summary, the deliveries, the ledger, dead letters."""
    head = Text.assemble(
        ("trace ", "bold"),
        (trace.ident, "bold cyan"),
        f" ({trace.matched.replace('_', ' ')})\n",
        ("outcome: ", "bold"),
        trace.outcome,
    )
    parts: list[RenderableType] = [head]
    if trace.message_ids:
        parts.append(Text(f"message {', '.join(trace.message_ids)}"))
    if trace.trace_ids:  # to look up in a tracing UI (Jaeger, Tempo...)
        parts.append(Text(f"otel trace {', '.join(trace.trace_ids)}"))
    parts.append(_deliveries(trace.deliveries) if trace.deliveries else Text("no delivery"))
    parts.extend(_ledger(entry) for entry in trace.ledger)
    if not trace.ledger:
        parts.append(Text("no ledger record"))
    if trace.dead_letters:
        table = Table("id", "at", "check", "reason", "retried", title="dead letters")
        for letter in trace.dead_letters:
            table.add_row(
                str(letter.id), letter.at, letter.check, letter.reason, letter.retried_at or "open"
            )
        parts.append(table)
    skips = [s for d in trace.deliveries for s in d.skips if s.detail]
    parts.extend(Text(f"skip at {s.offset}: {s.reason}: {s.detail}") for s in skips)
    return Group(*parts)


def render_text(trace: Trace, width: int = 160) -> str:
    """The trace as plain text (no colours), ``width`` columns wide."""
    console = Console(file=io.StringIO(), width=width, no_color=True, color_system=None)
    console.print(render(trace))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out)

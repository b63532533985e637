"""What the model cost today, per tenant: the operator page's "Model usage today" section.

Read from the reply ledger, where each reply's record carries the writer's reported usage
(``usage``, ledger version 4). The tenant is the record's inbox (the AgentMail inbox or
the Nylas grant), the default ``ONCEONLY_TENANT_KEY``; with another key the section still
counts by inbox, since the ledger does not keep envelope fields. A reply counts once (its
latest record), on the day it was recorded (UTC).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time

from onceonly.foundation.kafka import Connection, ranges, read
from onceonly.foundation.settings import Settings
from onceonly.operations.approvals import Found
from onceonly.operations.ops_view import Table
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord

COLUMNS = ("tenant (inbox)", "model", "replies", "input tokens", "output tokens")


def day_totals(records: Iterable[ReplyRecord], day: date) -> Table:
    """The usage of the replies recorded on ``day``, per tenant and model, dearest first;
    a last row sums them all."""
    latest: dict[str, ReplyRecord] = {}
    for record in records:  # in topic order: a later write of a key replaces the earlier
        latest[record.key] = record
    sums: dict[tuple[str, str], list[int]] = {}
    for record in latest.values():
        usage = record.usage
        if usage is None or record.created_at.date() != day:
            continue
        row = sums.setdefault((record.inbox_id, usage.model), [0, 0, 0])
        row[0] += 1
        row[1] += usage.input_tokens
        row[2] += usage.output_tokens
    return usage_table(sums)


def usage_table(sums: Mapping[tuple[str, str], Sequence[int]]) -> Table:
    """The section's table of (tenant, model) -> replies, input and output tokens: dearest
    first, and a last row summing them all."""
    ordered = sorted(sums.items(), key=lambda kv: (-(kv[1][1] + kv[1][2]), kv[0]))
    rows = [(tenant, model, *map(str, n)) for (tenant, model), n in ordered]
    if rows:
        total = [sum(n[i] for _, n in ordered) for i in range(3)]
        rows.append(("all", "", *map(str, total)))
    return Table(COLUMNS, tuple(rows))


def today_usage(settings: Settings) -> Found[Table]:
    """Today's usage (UTC): from the index's sums when one is built (saying how far behind
    it is), else from the day's ledger records read whole."""
    from onceonly.operations import index

    today = datetime.now(UTC).date()
    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.usage(settings, today.isoformat())
        return Found(usage_table({(i, m): n for i, m, n in answer.value}), answer.line())
    said = f"answered by reading today's ledger records ({reason})"
    return Found(day_totals(ledger_records(settings, today), today), said)


def ledger_records(settings: Settings, day: date) -> list[ReplyRecord]:
    """The ledger's records written since ``day`` began (UTC) that decode as replies (an
    effect's record shares the ledger). A page read: never on a hot path."""
    since = datetime.combine(day, time.min, tzinfo=UTC)
    connection, topic = Connection.from_settings(settings), settings.ledger_topic
    wanted = ranges(connection, topic, from_time=since)
    out: list[ReplyRecord] = []
    for message in read(connection, topic, wanted):
        value = message.value()
        try:
            if value is not None:
                out.append(ReplyRecord.decode(value))
        except SchemaError:
            continue
    return out

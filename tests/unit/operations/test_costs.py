"""Today's model usage per tenant, from ledger records built by hand: no Kafka."""

from __future__ import annotations

from datetime import UTC, date, datetime

from onceonly.operations.costs import day_totals
from onceonly.operations.ops_template import render
from onceonly.schemas.ledger import ReplyRecord, ReplyState, Usage
from tests.unit.operations.test_ops_template import _view

DAY = date(2026, 12, 2)
AT = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)


def _record(key: str, inbox: str, usage: Usage | None, at: datetime = AT) -> ReplyRecord:
    return ReplyRecord(key, inbox, f"<{key}@x>", "agentmail:t", ReplyState.PENDING, at, usage=usage)


def test_each_reply_counts_once_per_tenant_and_model_dearest_first() -> None:
    a1 = _record("k1", "a@x", Usage("m", 100, 10))
    records = [
        a1,
        a1.with_state(ReplyState.SENT),  # the same reply, written again: counted once
        _record("k2", "a@x", Usage("m", 50, 5)),
        _record("k3", "b@x", Usage("m", 1000, 100)),
        _record("k4", "b@x", None),  # no usage reported
        _record("k5", "a@x", Usage("m", 7, 7), datetime(2026, 12, 1, 23, 59, tzinfo=UTC)),
    ]
    table = day_totals(records, DAY)
    assert table.rows == (
        ("b@x", "m", "1", "1000", "100"),
        ("a@x", "m", "2", "150", "15"),
        ("all", "", "3", "1150", "115"),
    )


def test_a_day_with_no_usage_has_no_rows_and_the_page_says_so() -> None:
    table = day_totals([_record("k1", "a@x", None)], DAY)
    assert table.rows == ()
    from onceonly.operations.ops_view import Read

    assert "No reply recorded today reported its usage" in render(_view(usage=Read(table)))


def test_the_page_shows_the_totals_escaped() -> None:
    from onceonly.operations.ops_view import Read

    table = day_totals([_record("k1", "<b>a@x</b>", Usage("m", 3, 4))], DAY)
    page = render(_view(usage=Read(table)))
    assert "&lt;b&gt;a@x&lt;/b&gt;" in page and "<b>a@x</b>" not in page
    assert "Model usage today" in page

"""The index's usage sums (the operator page's "Model usage today") against the day's ledger
read whole, on a real RocksDB index: no Kafka."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from onceonly.operations.costs import day_totals, usage_table
from onceonly.operations.index.layout import Topic
from onceonly.operations.index.store import IndexStore
from onceonly.operations.index.usage import day
from onceonly.operations.index.writes import plan
from onceonly.operations.trace import Record
from onceonly.schemas.ledger import ReplyRecord, ReplyState, Usage

DAYS = [date(2026, 12, 1), date(2026, 12, 2), date(2026, 12, 3)]
STATES = [ReplyState.PENDING, ReplyState.SENT, ReplyState.AWAITING, ReplyState.COVERED]


def _ledger(seed: int) -> list[tuple[str, ReplyRecord | None]]:
    """300 writes of 40 replies: each written again with other usage (or none), another
    state and day; some tombstoned last (a reply's key is never written after its tombstone:
    the ledger's retention removes only replies nothing can write again)."""
    draw = random.Random(seed)
    out: list[tuple[str, ReplyRecord | None]] = []
    for _ in range(300):
        key = f"reply-{draw.randrange(40)}"
        usage = None if draw.random() < 0.2 else Usage(draw.choice("mn"), draw.randrange(99), 7)
        at = datetime.combine(draw.choice(DAYS), datetime.min.time(), tzinfo=UTC)
        at += timedelta(seconds=draw.randrange(86_400))
        inbox = draw.choice(["a@x", "b@x"])
        state = draw.choice(STATES)
        out.append((key, ReplyRecord(key, inbox, f"<{key}@x>", "t", state, at, usage=usage)))
    for key in sorted({k for k, _ in out})[:5]:
        out.append((key, None))
    return out


def _indexed(path: Path, ledger: list[tuple[str, ReplyRecord | None]], seed: int) -> IndexStore:
    """The ledger read into the index in batches of drawn sizes (a reply's record before
    it is found in the same batch, or in the index)."""
    store = IndexStore.writer(path)
    draw, at = random.Random(seed), 0
    while at < len(ledger):
        size = draw.randint(1, 40)
        records = [
            Record(0, n, 0, key.encode(), None if r is None else r.encode())
            for n, (key, r) in enumerate(ledger[at : at + size], start=at)
        ]
        store.write(plan(Topic.LEDGER, records, store.get), "l", 0, at + len(records))
        at += len(records)
    return store


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_index_sums_each_days_usage_as_the_ledger_read_whole_does(
    tmp_path: Path, seed: int
) -> None:
    ledger = _ledger(seed)
    store = _indexed(tmp_path / "index", ledger, seed)

    for one in DAYS:
        sums = {(i, m): n for i, m, n in day(store, one.isoformat())}
        whole = day_totals([r for _, r in ledger if r is not None], one)
        assert usage_table(sums) == whole
        assert whole.rows  # the drawn ledger reports usage on every day

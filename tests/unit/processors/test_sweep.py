"""The worker's dedupe sweep: one partition's own store, a slice at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from rocksdict import Options, Rdict

from onceonly.foundation.settings import Settings
from onceonly.processors.dedupe.decisions import Retention
from onceonly.processors.dedupe.sweep import Sweeper
from onceonly.processors.runtime.tables import FaustTable
from onceonly.schemas.ledger import EventEntry, EventState

DAY_MS = 24 * 3600 * 1000
NOW_MS = 100 * DAY_MS


class _Table:
    """What the sweep reaches of a faust table through FaustTable: its store's DB and ``del``."""

    def __init__(self, db: Rdict) -> None:
        self.db = db
        self.data = SimpleNamespace(
            _db_for_partition=lambda partition: db, offset_key=b"__faust\0offset__"
        )
        self.deleted: list[bytes] = []

    def __delitem__(self, key: bytes) -> None:
        self.deleted.append(key)
        del self.db[key]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Rdict]:
    store = Rdict(str(tmp_path / "events-3"), Options(raw_mode=True))
    yield store
    store.close()


def _pipeline(events: _Table, slice_size: int, **by_provider: timedelta) -> Sweeper:
    retention = Retention.of(
        Settings(dedupe_retention=timedelta(days=7), dedupe_retention_by_provider=by_provider)
    )
    return Sweeper(
        FaustTable(events), {}, retention=retention, clock=lambda: NOW_MS / 1000, slice=slice_size
    )


def _put(db: Rdict, n: int, age_days: int, provider: str = "agentmail") -> bytes:
    key = f"{provider}:evt-{n:03d}".encode()
    entry = EventEntry(EventState.SUCCEEDED, NOW_MS - age_days * DAY_MS, (3, n))
    db[key] = json.dumps(entry.to_json()).encode()
    return key


def test_a_pass_reads_the_store_a_slice_at_a_time(db: Rdict) -> None:
    for n in range(12):
        _put(db, n, age_days=1)
    db[b"__faust\0offset__"] = b"41"  # faust's own bookkeeping, in the same DB
    pipeline = _pipeline(_Table(db), slice_size=5)

    first = pipeline.sweep(3)
    second = pipeline.sweep(3, after=first)
    third = pipeline.sweep(3, after=second)

    assert (first, second, third) == (b"agentmail:evt-004", b"agentmail:evt-009", None)


def test_only_entries_past_the_retention_are_deleted(db: Rdict) -> None:
    old = [_put(db, n, age_days=8) for n in (1, 6, 11)]
    fresh = [_put(db, n, age_days=6) for n in (2, 7)]
    events = _Table(db)
    pipeline = _pipeline(events, slice_size=2)

    after = pipeline.sweep(3)
    while after is not None:
        after = pipeline.sweep(3, after=after)

    assert sorted(events.deleted) == sorted(old)
    assert [bytes(k) for k, _ in db.items()] == sorted(fresh)


def test_a_providers_own_window_is_the_one_its_entries_expire_on(db: Rdict) -> None:
    agentmail = [_put(db, n, age_days=3) for n in (1, 2)]
    stripe = [_put(db, n, age_days=3, provider="stripe") for n in (1, 2)]
    events = _Table(db)
    pipeline = _pipeline(events, slice_size=10, agentmail=timedelta(days=2))

    assert pipeline.sweep(3) is None
    assert sorted(events.deleted) == sorted(agentmail)
    assert sorted(bytes(k) for k, _ in db.items()) == sorted(stripe)


def test_maybe_sweep_goes_on_slice_by_slice_then_waits_an_interval(db: Rdict) -> None:
    for n in range(7):
        _put(db, n, age_days=8)
    events = _Table(db)
    pipeline = _pipeline(events, slice_size=3)
    now = [NOW_MS / 1000]
    pipeline.clock = lambda: now[0]
    pipeline.every_s = 60

    pipeline.maybe_sweep(3)  # the first record only starts the clock
    now[0] += 61
    swept = []
    for _ in range(4):
        pipeline.maybe_sweep(3)
        swept.append(len(events.deleted))

    assert swept == [3, 6, 7, 7]

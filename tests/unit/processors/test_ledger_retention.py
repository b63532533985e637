"""The reply ledger's retention: which records the sweep may remove, the sweep a slice at
a time, and the worker's refusal to answer a message older than the horizon."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from onceonly.processors.exceptions import Fenced, Rebalancing
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.retention import (
    CLOCK_SLACK,
    PAST_RETENTION,
    SETTLED,
    LedgerSweeper,
    expired_keys,
    past_retention,
    settled_expired,
)
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.conftest import TEST_LEDGER_RETENTION
from tests.unit.processors._pipeline import mail_pipeline

HORIZON = timedelta(days=15)
NOW = datetime(2027, 1, 31, 12, 0, tzinfo=UTC)
INBOX = "support@agentmail.to"


def _record(state: ReplyState, age: timedelta, n: int = 1, **changes: Any) -> ReplyRecord:
    at = NOW - age
    return ReplyRecord(
        f"{INBOX}:<m{n}@x>",
        INBOX,
        f"<m{n}@x>",
        "agentmail:thr",
        state,
        at,
        message_at=at,
        **changes,
    )


PAST = HORIZON + CLOCK_SLACK + timedelta(seconds=1)
INSIDE = HORIZON + CLOCK_SLACK - timedelta(seconds=1)


@pytest.mark.parametrize("state", sorted(SETTLED))
def test_a_settled_record_goes_only_past_the_horizon_and_its_slack(state: ReplyState) -> None:
    assert settled_expired(_record(state, PAST), NOW, HORIZON)
    assert not settled_expired(_record(state, INSIDE), NOW, HORIZON)


@pytest.mark.parametrize("state", [ReplyState.PENDING, ReplyState.AWAITING])
def test_a_pending_or_awaiting_record_never_goes_however_old(state: ReplyState) -> None:
    assert not settled_expired(_record(state, timedelta(days=3650)), NOW, HORIZON)


def test_a_records_latest_time_counts_a_late_decision_and_a_later_message() -> None:
    old = _record(ReplyState.SENT, PAST)
    decided = Approval(Verdict.APPROVED, "ana", NOW - INSIDE, "d-1")
    assert not settled_expired(old.with_state(ReplyState.SENT, approval=decided), NOW, HORIZON)
    newer_message = old.with_state(ReplyState.SENT, message_at=NOW - INSIDE)
    assert not settled_expired(newer_message, NOW, HORIZON)


def test_a_message_past_the_horizon_is_never_answered_one_inside_is() -> None:
    assert past_retention(NOW - HORIZON - timedelta(seconds=1), NOW, HORIZON)
    assert not past_retention(NOW - HORIZON + timedelta(seconds=1), NOW, HORIZON)
    # whatever removed the record, its message is past the horizon by then
    gone = _record(ReplyState.SENT, PAST)
    assert past_retention(gone.message_at or gone.created_at, NOW, HORIZON)


def test_expired_keys_leaves_records_that_are_no_replies() -> None:
    entries = [
        (b"a", _record(ReplyState.SENT, PAST, 1).encode()),
        (b"b", b'{"effect": "not a reply"}'),
        (b"c", b"\xff not json"),
        (b"d", _record(ReplyState.SENT, INSIDE, 4).encode()),
    ]
    assert [key for key, _ in expired_keys(entries, NOW, HORIZON)] == [b"a"]


def test_the_horizon_is_refused_below_the_catch_up_look_back_or_the_dedupe_retention() -> None:
    with pytest.raises(ConfigError, match="ONCEONLY_CATCHUP_LOOKBACK"):
        Settings.from_env(ledger_retention="P6D")  # the look-back defaults to 7 days
    with pytest.raises(ConfigError, match="ONCEONLY_DEDUPE_RETENTION"):
        Settings.from_env(ledger_retention="P8D", dedupe_retention_by_provider="stripe=P9D")
    assert Settings.from_env().ledger_retention == timedelta(days=15)
    tiny = Settings.from_env(ledger_retention="3", dedupe_retention="2", catchup_lookback="PT1S")
    assert tiny.ledger_retention == timedelta(seconds=3)


class _Store:
    """A partition's store in key order, as FaustTable.own_entries reads it."""

    def __init__(self, records: dict[bytes, bytes]) -> None:
        self.data = dict(sorted(records.items()))

    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return ((k, v) for k, v in list(self.data.items()) if after is None or k > after)


def _sweeper(store: _Store, removed: list[bytes], every_s: float = 60.0) -> LedgerSweeper:
    async def remove(keys: Sequence[bytes], partition: int) -> None:
        assert partition == 3
        for key in keys:
            removed.append(key)
            del store.data[key]

    clock = [NOW.timestamp()]
    sweeper = LedgerSweeper(
        store,  # type: ignore[arg-type]
        remove,
        HORIZON,
        lambda: clock[0],
        slice=2,
        every_s=every_s,
    )
    sweeper.clock_cell = clock  # type: ignore[attr-defined]
    return sweeper


async def test_the_sweep_removes_settled_records_past_the_horizon_a_slice_at_a_time() -> None:
    states = [ReplyState.SENT, ReplyState.PENDING, ReplyState.AWAITING, ReplyState.DECLINED]
    records = {f"k{n}".encode(): _record(s, PAST, n).encode() for n, s in enumerate(states)}
    records[b"k4"] = _record(ReplyState.COVERED, INSIDE, 4).encode()
    store, removed = _Store(records), []
    sweeper = _sweeper(store, removed)

    after = await sweeper.sweep(3)
    assert (after, removed) == (b"k1", [b"k0"])  # one slice of two entries read
    assert await sweeper.sweep(3, after=after) == b"k3"
    assert await sweeper.sweep(3, after=b"k3") is None  # the pass is over
    assert removed == [b"k0", b"k3"]
    assert sorted(store.data) == [b"k1", b"k2", b"k4"]


async def test_a_pass_starts_a_whole_interval_after_the_first_record_then_goes_on() -> None:
    records = {f"k{n}".encode(): _record(ReplyState.SENT, PAST, n).encode() for n in range(5)}
    store, removed = _Store(records), []
    sweeper = _sweeper(store, removed, every_s=60.0)
    clock = sweeper.clock_cell  # type: ignore[attr-defined]

    await sweeper.maybe_sweep(3)
    assert removed == []  # the first record starts the interval
    clock[0] += 61
    for _ in range(3):  # a slice per record the partition receives
        await sweeper.maybe_sweep(3)
    assert len(removed) == 5


@pytest.mark.parametrize(
    "refusal",
    [
        Fenced("partition 3 moved"),
        # a worker stopping: its check could not be made; escaping the agent loop it would
        # end the worker with code 70 (runtime.worker.admit_or_exit) on an ordinary stop
        Rebalancing("ownership of partition 3 could not be checked: the consumer is stopping"),
    ],
    ids=type,
)
async def test_a_fenced_sweep_stops_its_pass(refusal: Exception) -> None:
    records = {b"k0": _record(ReplyState.SENT, PAST).encode()}
    store = _Store(records)

    async def fenced(keys: Sequence[bytes], partition: int) -> None:
        raise refusal

    sweeper = LedgerSweeper(store, fenced, HORIZON, lambda: NOW.timestamp(), every_s=0.0)  # type: ignore[arg-type]
    await sweeper.maybe_sweep(3)  # starts the interval
    await sweeper.maybe_sweep(3)  # fenced: logged, not raised
    assert b"k0" in store.data


def _delivery(mail: FakeAgentMail, n: int, replay: bool) -> Delivery:
    message_id = f"<old{n}@example.com>"
    mail.seed_message(INBOX, message_id=message_id, thread_id=f"thr-{n}")
    payload = payloads.agentmail_received(
        inbox_id=INBOX,
        thread_id=f"thr-{n}",
        message_id=message_id,
        timestamp="2026-11-29T10:00:00.000Z",
    )
    envelope = normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC))
    return Delivery(envelope, (0, n), replay=replay)


@pytest.mark.parametrize("replay", [False, True])
async def test_a_message_older_than_the_horizon_is_skipped_one_inside_is_answered(
    mail: FakeAgentMail, replay: bool
) -> None:
    message_at = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    for n, age in ((1, TEST_LEDGER_RETENTION + timedelta(minutes=1)), (2, timedelta(days=1))):
        now = (message_at + age).timestamp()
        write = Writer(lambda burst: "an answer", WriterPolicy(attempts=1))
        pipeline = mail_pipeline(mail, "never", writer=write, clock=lambda now=now: now)
        delivery = _delivery(mail, n, replay)
        outcomes: dict[str, bool] = {}

        await pipeline.act([delivery], outcomes)

        assert outcomes.get(delivery.envelope.event_id, True)  # absent: it succeeded
        skipped = pipeline.parts.metrics.skips.labels(PAST_RETENTION)._value.get()
        assert skipped == (1 if n == 1 else 0)
    # the old message is skipped whether a provider or a replay brought it; the new answered
    assert [e.replied_to_message_id for e in mail.outbox] == ["<old2@example.com>"]


async def test_catch_up_feeds_no_message_older_than_the_horizon() -> None:
    from onceonly.operations.catchup import Answered, Summary

    def envelope(stamp: str) -> Any:
        payload = payloads.agentmail_received(inbox_id=INBOX, timestamp=stamp)
        return normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC))

    summary = Summary(not_before=datetime(2027, 1, 16, tzinfo=UTC))
    fed: list[Any] = []
    old, new = envelope("2027-01-15T23:59:59.000Z"), envelope("2027-01-16T00:00:01.000Z")
    for n, e in enumerate((old, new)):
        await summary.feed(f"k{n}", e, answered=Answered(), feed=fed.append)

    assert fed == [new] and summary.fed == ["k1"]
    assert summary.skipped_past_retention == 1


async def test_the_ledgers_own_tombstone_is_fenced_and_never_read_as_another_writers() -> None:
    from tests.unit.processors.test_arbitration import _ledger
    from tests.unit.processors.test_arbitration import _record as _owed

    ledger, topic, reads = _ledger(recovered=3)
    checked: list[str] = []

    async def fence(before: str) -> None:
        checked.append(before)

    ledger.fence = fence
    await ledger.remove([b"old1"], 0)  # the sweep's tombstone lands before the own record
    own = _owed("k", ReplyState.PENDING, "mine")
    await ledger.put(own)

    verdict = await ledger.arbitrate(own)

    assert topic[3] == (b"old1", None) and ledger.get("old1") is None
    assert checked == ["a ledger tombstone", "a ledger record"]
    assert reads.calls == [] and verdict.record.reply_text == "mine"

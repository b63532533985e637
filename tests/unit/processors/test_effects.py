"""The effect ledger: key, canonical hash, perform once, refuse a changed payload."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
import structlog

from onceonly.ingest import normalise
from onceonly.processors.effects.handlers import handle_event
from onceonly.processors.effects.once import (
    EffectConflict,
    EffectPlan,
    EffectRecord,
    Effects,
    EffectState,
    decide_effect,
    effect_key,
    payload_hash,
    run_handler,
)
from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.reorder.holds import Delivery
from testkit import payloads

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _envelope(event_id: str = "evt_1") -> normalise.Envelope:
    body = payloads.dumps(payloads.stripe_event(event_id=event_id)).decode()
    return normalise.stripe(body, {}, NOW)


@dataclass
class MemoryLedger:
    data: dict[str, bytes] = field(default_factory=dict)

    def get_raw(self, key: str) -> bytes | None:
        return self.data.get(key)

    async def put_raw(self, key: str, value: bytes) -> None:
        self.data[key] = value


def test_the_key_names_the_event_and_the_action() -> None:
    envelope = _envelope()

    assert effect_key(envelope, "send_receipt") == effect_key(envelope, "send_receipt")
    assert effect_key(envelope, "send_receipt") != effect_key(envelope, "refund")
    assert effect_key(envelope, "refund") != effect_key(_envelope("evt_2"), "refund")


def test_the_payload_hash_ignores_key_order() -> None:
    assert payload_hash({"a": 1, "b": [1, 2]}) == payload_hash({"b": [1, 2], "a": 1})
    assert payload_hash({"a": 1}) != payload_hash({"a": 2})


@pytest.mark.parametrize(
    ("state", "digest", "plan"),
    [
        (None, "h", EffectPlan.PERFORM),
        (EffectState.PENDING, "h", EffectPlan.PERFORM),
        (EffectState.DONE, "h", EffectPlan.DONE),
        (EffectState.DONE, "other", EffectPlan.CONFLICT),
        (EffectState.PENDING, "other", EffectPlan.CONFLICT),
    ],
)
def test_the_plan_follows_the_record(
    state: EffectState | None, digest: str, plan: EffectPlan
) -> None:
    record = EffectRecord("k", "h", state, NOW.isoformat()) if state else None

    assert decide_effect(record, digest) is plan


async def test_an_effect_is_performed_once_with_its_key() -> None:
    ledger = MemoryLedger()
    performed: list[str] = []
    effects = Effects(_envelope(), ledger, lambda: NOW)

    def perform(key: str) -> str:
        performed.append(key)
        return "receipt-1"

    first = await effects.once("send_receipt", {"invoice": "in_1"}, perform)
    second = await effects.once("send_receipt", {"invoice": "in_1"}, perform)

    assert (first, second) == ("receipt-1", "receipt-1")
    assert performed == [effect_key(_envelope(), "send_receipt")]


async def test_the_record_is_written_before_the_effect_runs() -> None:
    ledger = MemoryLedger()
    effects = Effects(_envelope(), ledger, lambda: NOW)
    seen: list[EffectState] = []

    def perform(key: str) -> None:
        seen.append(EffectRecord.decode(ledger.data[key]).state)

    await effects.once("send_receipt", {"invoice": "in_1"}, perform)

    assert seen == [EffectState.PENDING]


async def test_a_changed_payload_under_the_same_key_is_refused() -> None:
    ledger = MemoryLedger()
    effects = Effects(_envelope(), ledger, lambda: NOW)
    await effects.once("refund", {"amount": 100}, lambda key: None)

    with pytest.raises(EffectConflict, match="another payload"):
        await effects.once("refund", {"amount": 200}, lambda key: None)


def test_the_payload_hash_is_the_sha256_of_compact_sorted_unescaped_json() -> None:
    canonical = '{"a":"é","b":[1,2]}'
    assert payload_hash({"b": [1, 2], "a": "é"}) == hashlib.sha256(canonical.encode()).hexdigest()


async def test_the_pending_record_holds_the_key_the_payload_hash_and_the_time() -> None:
    ledger = MemoryLedger()
    effects = Effects(_envelope(), ledger, lambda: NOW)
    pending: list[EffectRecord] = []
    key = effect_key(_envelope(), "refund")

    await effects.once("refund", {"amount": 1}, lambda k: pending.append(_decoded(ledger, k)))

    assert pending == [
        EffectRecord(key, payload_hash({"amount": 1}), EffectState.PENDING, NOW.isoformat())
    ]


def _decoded(ledger: MemoryLedger, key: str) -> EffectRecord:
    return EffectRecord.decode(ledger.data[key])


async def test_an_async_perform_is_awaited_and_its_result_recorded() -> None:
    ledger = MemoryLedger()
    effects = Effects(_envelope(), ledger, lambda: NOW)

    async def perform(key: str) -> str:
        return "receipt-2"

    assert await effects.once("send_receipt", {}, perform) == "receipt-2"
    assert _decoded(ledger, effect_key(_envelope(), "send_receipt")).result == "receipt-2"


async def test_once_sync_runs_the_effect_on_the_loop_from_a_writers_thread() -> None:
    ledger = MemoryLedger()
    effects = Effects("reply-k", ledger, lambda: NOW, loop=asyncio.get_running_loop())
    performed: list[str] = []

    def perform(key: str) -> str:
        performed.append(key)
        return "done"

    result = await asyncio.to_thread(effects.once_sync, "note", {"n": 1}, perform)

    record = _decoded(ledger, effect_key("reply-k", "note"))
    assert (result, performed) == ("done", [effect_key("reply-k", "note")])
    assert (record.state, record.payload_hash) == (EffectState.DONE, payload_hash({"n": 1}))


def test_once_sync_without_the_workers_loop_is_refused() -> None:
    effects = Effects("reply-k", MemoryLedger(), lambda: NOW)
    with pytest.raises(RuntimeError) as raised:
        effects.once_sync("note", {}, lambda key: None)
    assert str(raised.value) == "once_sync() is for sync writers run by the worker"


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_run_handler_calls_the_handler_with_the_event_and_its_effects(
    asynchronous: bool,
) -> None:
    effects = Effects(_envelope(), MemoryLedger(), lambda: NOW)
    calls: list[tuple[object, object]] = []

    def handle(envelope: normalise.Envelope, given: Effects) -> None:
        calls.append((envelope, given))

    async def handle_async(envelope: normalise.Envelope, given: Effects) -> None:
        await asyncio.sleep(0)
        calls.append((envelope, given))

    await run_handler(handle_async if asynchronous else handle, _envelope(), effects)

    assert calls == [(_envelope(), effects)]


async def test_a_skipped_effect_is_logged_with_its_key_action_and_subject() -> None:
    ledger = MemoryLedger()
    effects = Effects(_envelope(), ledger, lambda: NOW)
    await effects.once("refund", {}, lambda key: None)

    with structlog.testing.capture_logs() as logs:
        await effects.once("refund", {}, lambda key: None)

    assert logs == [
        {
            "event": "effect skipped: already done",
            "log_level": "info",
            "key": effect_key(_envelope(), "refund"),
            "action": "refund",
            "subject": "event evt_1",
        }
    ]


async def test_a_refused_effect_names_the_action_and_the_event_and_says_what_to_do() -> None:
    effects = Effects(_envelope(), MemoryLedger(), lambda: NOW)
    await effects.once("refund", {"amount": 100}, lambda key: None)

    with pytest.raises(EffectConflict) as raised:
        await effects.once("refund", {"amount": 200}, lambda key: None)

    assert str(raised.value) == (
        "effect 'refund' of event evt_1 was recorded with another payload; "
        "refusing to perform it again: inspect the dead letter"
    )


class _Letters:
    def __init__(self) -> None:
        self.checks: list[str] = []

    async def record_failure(self, envelopes: object, *, check: str, error: str) -> None:
        self.checks.append(str(check))


class _FailingLedger(MemoryLedger):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def put_raw(self, key: str, value: bytes) -> None:
        raise self.error


def _handling(error: Exception) -> tuple[SimpleNamespace, _Letters]:
    async def refund(envelope: normalise.Envelope, effects: Effects) -> None:
        await effects.once("refund", {}, lambda key: None)

    letters = _Letters()
    parts = SimpleNamespace(
        handler=refund,
        ledger=_FailingLedger(error),
        metrics=None,
        decisions=None,
        dead_letters=letters,
        now=lambda: NOW,
    )
    return parts, letters


async def test_a_handler_whose_effect_record_fails_is_the_events_dead_letter() -> None:
    parts, letters = _handling(ValueError("an odd value"))

    assert await handle_event(parts, Delivery(_envelope(), (0, 1))) is False  # type: ignore[arg-type]
    assert letters.checks == ["handler_failed"]


async def test_the_broker_away_under_a_handler_is_the_workers_failure_not_the_events() -> None:
    """An effect's record the broker did not take may have landed: no dead letter, the
    worker exits and reads the event again (as a reply's ledger write, F36)."""
    parts, letters = _handling(BrokerUnavailable("the broker did not take a write"))

    with pytest.raises(BrokerUnavailable):
        await handle_event(parts, Delivery(_envelope(), (0, 1)))  # type: ignore[arg-type]
    assert letters.checks == []

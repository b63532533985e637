"""The effect ledger: key, canonical hash, perform once, refuse a changed payload."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from ingest import normalise
from processors.effects import (
    EffectConflict,
    EffectPlan,
    EffectRecord,
    Effects,
    EffectState,
    decide_effect,
    effect_key,
    payload_hash,
)
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

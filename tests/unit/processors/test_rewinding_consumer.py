"""The worker's Kafka consumer: the seek after a rebalance brings back every dropped record.

faust drops what it fetched for a stream partition while that partition was paused for
recovery, and counts on the seek to the committed offset to read it again. A partition
with no committed offset (its last owner died before its first commit) must be rewound
where ``auto_offset_reset`` says, or those records are never processed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP

from onceonly.processors.runtime.consumer import RewindingConsumer

STREAM = "deliveries"
CHANGELOG = "app-events-changelog"


def _consumer(
    monkeypatch: pytest.MonkeyPatch, committed: dict[TP, int | None], reset: str = "earliest"
) -> tuple[RewindingConsumer, dict[TP, int], list[bool]]:
    consumer = object.__new__(RewindingConsumer)  # no broker: only the seek logic runs
    consumer.app = SimpleNamespace(  # type: ignore[assignment]
        topics=SimpleNamespace(acks_enabled_for=lambda topic: topic == STREAM),
        conf=SimpleNamespace(consumer_auto_offset_reset=reset),
    )
    consumer.flow_active = True
    consumer.can_resume_flow = asyncio.Event()
    consumer.suspend_flow = asyncio.Event()
    consumer._read_offset = defaultdict(lambda: None)
    consumer._committed_offset = defaultdict(lambda: None)
    sought: dict[TP, int] = {}
    flow_at_seek: list[bool] = []

    async def seek_to_committed(self: Any) -> dict[TP, int | None]:
        flow_at_seek.append(self.flow_active)
        return committed

    async def earliest_offsets(self: Any, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 0)

    async def highwaters(self: Any, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 42)

    async def seek_wait(self: Any, partitions: dict[TP, int]) -> None:
        sought.update(partitions)

    monkeypatch.setattr(AIOKafkaConsumer, "seek_to_committed", seek_to_committed)
    monkeypatch.setattr(AIOKafkaConsumer, "earliest_offsets", earliest_offsets)
    monkeypatch.setattr(AIOKafkaConsumer, "highwaters", highwaters)
    monkeypatch.setattr(AIOKafkaConsumer, "seek_wait", seek_wait)
    return consumer, sought, flow_at_seek


async def test_a_stream_partition_without_a_committed_offset_is_rewound_to_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    committed = {
        TP(STREAM, 0): 6,
        TP(STREAM, 3): None,  # never committed: its last owner was killed first
        TP(STREAM, 7): 0,
        TP(CHANGELOG, 3): None,  # changelogs are recovery's business: left alone
    }
    consumer, sought, _ = _consumer(monkeypatch, committed)

    assert await consumer.seek_to_committed() == committed
    assert sought == {TP(STREAM, 3): 0, TP(STREAM, 7): 0}


async def test_auto_offset_reset_latest_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, sought, _ = _consumer(monkeypatch, {TP(STREAM, 1): None}, reset="latest")

    await consumer.seek_to_committed()

    assert sought == {TP(STREAM, 1): 42}


async def test_nothing_is_sought_when_every_partition_has_a_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer, sought, _ = _consumer(monkeypatch, {TP(STREAM, 0): 6, TP(STREAM, 1): 3})

    await consumer.seek_to_committed()

    assert sought == {}


async def test_the_flow_is_stopped_before_the_seek_and_left_for_faust_to_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer, sought, flow_at_seek = _consumer(monkeypatch, {TP(STREAM, 2): None})

    await consumer.perform_seek()

    assert flow_at_seek == [False]  # nothing is fetched into the queues faust clears next
    assert not consumer.flow_active
    assert sought == {TP(STREAM, 2): 0}
    assert consumer._read_offset[TP(STREAM, 2)] is None  # read again from the start

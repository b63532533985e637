"""Decision records: written off the ack path, a failed produce logged and never raised."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from onceonly.ingest import normalise
from onceonly.processors.decisions import Decisions
from onceonly.processors.reorder.holds import Delivery
from onceonly.schemas.decision import DecisionRecord, Stage
from onceonly.schemas.exceptions import SchemaError
from testkit import payloads


def _delivery() -> Delivery:
    body = json.dumps(payloads.agentmail_received(event_id="evt-1", message_id="<m@x>"))
    return Delivery(normalise.agentmail(body, {}, datetime.now(UTC)), (3, 17))


class _Topic:
    """A faust topic whose broker acknowledges only when the test says so (or fails)."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.ack = asyncio.Event()
        self.fail = fail

    async def send(self, **kwargs: Any) -> Any:
        if self.fail:
            raise RuntimeError("broker unreachable")
        self.sent.append(kwargs)
        ack = self.ack

        async def acknowledged() -> None:
            await ack.wait()

        return acknowledged()


async def test_a_skip_is_recorded_without_waiting_for_the_broker() -> None:
    topic = _Topic()
    decisions = Decisions(topic, clock=lambda: 1_764_583_200.0)

    decisions.skipped(_delivery(), Stage.MESSAGE, "own_message")  # returns at once
    await asyncio.sleep(0)

    [sent] = topic.sent
    record = DecisionRecord.decode(sent["value"])
    assert (sent["partition"], sent["key"]) == (3, record.thread_key.encode())
    assert (record.stage, record.reason, record.event_id, record.offset) == (
        Stage.MESSAGE,
        "own_message",
        "evt-1",
        17,
    )
    topic.ack.set()


async def test_a_failed_produce_is_logged_not_raised() -> None:
    decisions = Decisions(_Topic(fail=True))

    with capture_logs() as logs:
        decisions.skipped(_delivery(), Stage.DEDUPE, "duplicate")
        await asyncio.sleep(0.01)

    assert [e["event"] for e in logs] == ["decision record not written"]
    assert logs[0]["event_id"] == "evt-1"


async def test_past_the_cap_of_unacknowledged_records_new_ones_are_dropped() -> None:
    topic = _Topic()
    decisions = Decisions(topic, max_in_flight=2)

    for _ in range(3):
        decisions.skipped(_delivery(), Stage.DEDUPE, "duplicate")
    await asyncio.sleep(0)

    assert (len(topic.sent), decisions.dropped) == (2, 1)
    topic.ack.set()


def test_a_decision_record_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(SchemaError, match="version 9"):
        DecisionRecord.decode(b'{"v": 9}')

"""The decisions topic: one record per skip, written off the ack path.

:meth:`Decisions.skipped` returns at once: the record is produced by a task of its own,
never awaited by the record's processing, so a slow or absent decisions topic neither
delays nor fails a reply. A failed produce is logged, not raised; past ``max_in_flight``
records not yet acknowledged (a broker outage) new ones are dropped, and logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.once import BurstResult, Outcome
from onceonly.schemas.decision import DecisionRecord, Stage
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.worker")


def record_for(
    delivery: Delivery, stage: Stage, reason: str, at: datetime, detail: str | None = None
) -> DecisionRecord:
    """The decision record of a delivery let go at ``stage`` for ``reason``."""
    envelope = delivery.envelope
    return DecisionRecord(
        stage=stage,
        reason=reason,
        detail=detail,
        provider=envelope.provider,
        event_id=envelope.event_id,
        message_id=envelope.message_id,
        thread_key=envelope.thread_key,
        partition=delivery.position[0],
        offset=delivery.position[1],
        replay=delivery.replay,
        at=at,
    )


class Decisions:
    """Writes decision records to ``topic`` (a faust Topic, raw bytes); None: writes none."""

    def __init__(
        self,
        topic: Any = None,
        clock: Callable[[], float] | None = None,
        max_in_flight: int = 1000,
    ) -> None:
        self.topic = topic
        self.clock = clock
        self.max_in_flight = max_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()
        self.dropped = 0

    def skipped(
        self, delivery: Delivery, stage: Stage, reason: str, detail: str | None = None
    ) -> None:
        """Record that ``delivery`` was let go; returns without waiting for the broker."""
        if self.topic is None:
            return
        now = self.clock() if self.clock is not None else datetime.now(UTC).timestamp()
        record = record_for(delivery, stage, reason, datetime.fromtimestamp(now, tz=UTC), detail)
        if len(self._in_flight) >= self.max_in_flight:
            self.dropped += 1
            log.warning(
                "decision record dropped: too many not yet acknowledged",
                event_id=record.event_id,
                reason=reason,
            )
            return
        task = asyncio.get_running_loop().create_task(self._send(record))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    def dedupe(self, delivery: Delivery, verdict: str) -> None:
        """Skipped by dedupe (``duplicate``, ``in_progress``, ``failed``)."""
        self.skipped(delivery, Stage.DEDUPE, verdict)

    def ledger_skip(
        self, record: ReplyRecord | None, result: BurstResult, deliveries: Sequence[Delivery]
    ) -> None:
        """The burst got no new reply: the ledger had one (``record``), or the writer declined."""
        declined = result.outcome is Outcome.DECLINED
        detail = f"{result.key}: {record.state.value if record else 'no record'}"
        if declined and record is not None and record.reason:
            detail = record.reason
        for delivery in deliveries:
            reason = "declined" if declined else "already_answered"
            self.skipped(delivery, Stage.LEDGER, reason, detail)

    async def _send(self, record: DecisionRecord) -> None:
        try:
            sent = await self.topic.send(
                key=record.thread_key.encode(),
                value=record.encode(),
                partition=record.partition,
                force=True,  # never attached to the record's event: off the ack path
            )
            await sent
        except Exception as exc:  # a decision record is for people: never the reply's failure
            log.warning(
                "decision record not written",
                event_id=record.event_id,
                reason=record.reason,
                error=repr(exc),
            )

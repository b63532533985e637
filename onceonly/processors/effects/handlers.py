"""A non-mail event handed to ONCEONLY_EVENT_HANDLER, with an effect ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import structlog

from onceonly.processors.dead_letters import DeadLetters
from onceonly.processors.decisions import Decisions
from onceonly.processors.effects.once import EffectConflict, Effects, EventHandler, run_handler
from onceonly.processors.exceptions import BrokerUnavailable, Rebalancing
from onceonly.processors.metrics import WorkerMetrics
from onceonly.processors.reorder.holds import Delivery
from onceonly.schemas.dead_letter import Check
from onceonly.schemas.decision import Stage

log = structlog.get_logger("onceonly.worker")


class Parts(Protocol):
    """What handling an event needs of the worker's pipeline."""

    handler: EventHandler | None
    ledger: Any
    metrics: WorkerMetrics
    decisions: Decisions
    dead_letters: DeadLetters

    def now(self) -> datetime: ...


async def handle_event(parts: Parts, delivery: Delivery) -> bool:
    """Run the handler on the event (True: done, or no handler); a handler's failure is
    this event's, not the worker's: dead-lettered, False."""
    handler, metrics, decisions = parts.handler, parts.metrics, parts.decisions
    envelope = delivery.envelope
    ids = {"provider": envelope.provider, "event_id": envelope.event_id}
    if handler is None:
        metrics.skips.labels("no_handler").inc()
        log.info("event recorded; no ONCEONLY_EVENT_HANDLER configured", **ids)
        decisions.skipped(delivery, Stage.HANDLER, "no_handler")
        return True
    effects = Effects(envelope, parts.ledger, parts.now)
    try:
        await run_handler(handler, envelope, effects)
    # the partition is not ours (Fenced): its owner runs the handler; or an effect's record
    # the broker did not take: the worker exits, no letter (F36)
    except (Rebalancing, BrokerUnavailable):
        raise
    except Exception as exc:
        check = Check.EFFECT_CONFLICT if isinstance(exc, EffectConflict) else Check.HANDLER_FAILED
        log.error("event handler failed; dead-lettered", reason=check, error=repr(exc), **ids)
        await parts.dead_letters.record_failure([envelope], check=check, error=str(exc))
        return False
    return True

"""The ``events`` table: claiming deliveries before acting, recording how they ended.

The decisions are :mod:`onceonly.processors.dedupe.decisions`'s; this holds only the table's side
of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from onceonly.foundation import tracing
from onceonly.processors.dedupe import decisions as dedupe
from onceonly.processors.records import KeyValues
from onceonly.processors.reorder.holds import Delivery, log_ids
from onceonly.schemas.ledger import EventEntry

log = structlog.get_logger("onceonly.worker")


def claim(
    events: KeyValues,
    deliveries: Sequence[Delivery],
    *,
    now_ms: int,
    metrics: Any,
    on_skip: Callable[[Delivery, str], None] = lambda delivery, verdict: None,
    read_from: Callable[[int], int | None] = lambda partition: None,
) -> list[Delivery]:
    """The deliveries to act on: new events claimed in progress, duplicates skipped (logged,
    counted and passed to ``on_skip`` with their verdict); a late event is counted and
    logged, never dropped. ``read_from``: a partition's first offset read since this
    worker was given it (a claim owned by a record before it is stale: ``dedupe.stale``)."""
    if not deliveries:  # a reply's look for newer messages that found none: no span
        return []
    with tracing.step("dedupe", deliveries=len(deliveries)) as span:
        claimed: list[Delivery] = []
        for delivery in deliveries:
            ids = log_ids(delivery.envelope)
            if delivery.late:
                metrics.late.inc()
                log.warning(
                    "late event: processed after a later one of its thread",
                    **ids,
                )
            key = delivery.envelope.dedupe_key.encode()
            raw = events.get(key)
            current = EventEntry.from_json(json.loads(raw)) if raw else None
            since = read_from(delivery.position[0])
            decision = dedupe.decide(
                current,
                position=delivery.position,
                now_ms=now_ms,
                replay=delivery.replay,
                read_from=since,
            )
            if current is not None and dedupe.stale(current, delivery.position, since):
                log.warning(
                    "an event's claim was left in progress by a record committed before; "
                    "its outcome was lost: processed again",
                    owner=list(current.owner),
                    **ids,
                )
            if decision.skip:
                metrics.duplicates.labels(decision.verdict.value).inc()
                log.info("delivery skipped", verdict=decision.verdict.value, **ids)
                on_skip(delivery, decision.verdict.value)
                continue
            assert decision.entry is not None
            events[key] = json.dumps(decision.entry.to_json()).encode()
            claimed.append(delivery)
        span.set("onceonly.accepted", len(claimed))
    return claimed


def finish(
    events: KeyValues,
    claimed: Sequence[Delivery],
    outcomes: dict[str, bool],
    *,
    now_ms: int,
) -> None:
    """Each claimed event ends succeeded, or failed where its outcome says so."""
    for delivery in claimed:
        envelope = delivery.envelope
        entry = dedupe.finished(
            outcomes.get(envelope.event_id, True), position=delivery.position, now_ms=now_ms
        )
        events[envelope.dedupe_key.encode()] = json.dumps(entry.to_json()).encode()

"""What runs around the agent loop: timers (ticks, drafts, the webhook's health), the
rebalance signals, the senders' shutdown, the model budget's share and ``/metrics``."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import structlog

from onceonly.foundation.kafka import Connection, log_ends
from onceonly.foundation.kafka.exceptions import KafkaAdapterError
from onceonly.foundation.settings import Settings
from onceonly.processors.approval import applying as approving
from onceonly.processors.exceptions import LedgerUnreadable, Rebalancing
from onceonly.processors.flow.admission import owned_share
from onceonly.processors.health import WebhookHealth, check_webhook
from onceonly.processors.metrics import LagCollector
from onceonly.processors.router import Router
from onceonly.processors.runtime.progress import log_recovery, wire_progress

log = structlog.get_logger("onceonly.worker")


def wire_lifecycle(
    app: faust.App,
    router: Router,
    settings: Settings,
    tick_interval_s: float | None,
    health: WebhookHealth,
) -> None:
    """Timers, signals and the web page around the router."""

    async def close_senders(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        router.parts.writer.close()
        for channel in router.parts.channels.values():
            await channel.sender.aclose()

    app.on_before_shutdown.connect(close_senders)

    async def on_rebalance_complete(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        router.forget_state()  # the tables of this worker's partitions are recovered now
        log_recovery(app.tables.recovery)

    app.on_rebalance_complete.connect(on_rebalance_complete)
    wire_progress(app)

    if settings.reorder_window_ms > 0:
        interval = tick_interval_s or max(0.05, settings.reorder_window_ms / 4000)
        app.timer(interval, name="onceonly.tick")(router.tick)

    _wire_drafts(app, router, settings)
    _wire_ledger_audit(app, router, settings)

    if settings.agentmail_webhook_id:
        agentmail = router.parts.channels["agentmail"]

        async def webhook_health() -> None:
            await check_webhook(
                settings.agentmail_webhook_id, agentmail.sender, router.parts.metrics, health
            )

        app.task(webhook_health)  # once at start-up: timers first wait an interval
        app.timer(settings.webhook_poll_s, name="onceonly.webhook")(webhook_health)
    router.parts.metrics.registry.register(
        LagCollector(
            Connection.from_settings(settings), settings.app_id, [settings.deliveries_topic]
        )
    )

    async def metrics_page(web: Any, request: Any) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST

        router.parts.metrics.writer_in_flight.set(router.parts.writer.in_flight)
        return web.bytes(
            await render_metrics(router.parts.metrics.registry),
            content_type=CONTENT_TYPE_LATEST.split(";")[0],
        )

    app.page("/metrics")(metrics_page)


def _wire_drafts(app: faust.App, router: Router, settings: Settings) -> None:
    """With approval on, the drafts' survey on a timer: their metrics, and their timeout."""
    if settings.approval == "never":
        return
    acted: set[str] = set()

    async def drafts() -> None:
        await approving.sweep(router.parts, acted)

    every = approving.sweep_interval_s(settings.approval_timeout.total_seconds())
    app.timer(every, name="onceonly.drafts")(drafts)


def _wire_ledger_audit(app: faust.App, router: Router, settings: Settings) -> None:
    """Every ONCEONLY_LEDGER_AUDIT_S, the ledger partitions this worker owns are read for
    another writer's late record of a key it settled (TableLedger.audit): one log-end
    query per partition, and a read only of offsets that are not the worker's own. Each
    partition not yet taken over since the last rebalance is first (TableLedger.take_over:
    its records of the last compaction lag, for a late record the last owner did not live
    to repair; the simulator's finding F29), unless a lane's work there did it (F38).
    Then the replies it recorded *failed* with their sends' outcomes unknown, once due, are
    read again in their threads (:class:`~onceonly.processors.reply.late_sends.LateSends`)."""
    connection = Connection.from_settings(settings)
    topic = settings.ledger_topic
    ledger = router.parts.ledger

    def assigned() -> list[int]:
        found = app.consumer.assignment()
        return sorted(tp.partition for tp in found if tp.topic == settings.deliveries_topic)

    def owns(partition: int) -> bool:  # asked as the check goes: a rebalance may have begun
        return not app.rebalancing and partition in assigned()

    async def audit() -> None:
        if app.rebalancing:  # stores recovering: the audit after the rebalance reads them
            return
        owned = assigned()
        if not owned:
            return
        try:
            for partition in owned:
                await ledger.take_overs.once(partition)
            ends = await asyncio.to_thread(log_ends, connection, topic, owned)
            for partition in owned:
                await ledger.audit(partition, ends[partition])
            await router.parts.late_sends.check(ledger, owns)
        except (KafkaAdapterError, LedgerUnreadable) as exc:  # the next audit tries again
            log.warning("ledger audit skipped: the broker did not answer", error=str(exc))
        except Rebalancing as exc:  # a take-over's repair fenced: the partition moved
            log.info("ledger audit stood down: the partitions are moving", reason=str(exc))

    app.timer(settings.ledger_audit_s, name="onceonly.ledger_audit")(audit)


def share_model_budget(app: faust.App, router: Router, settings: Settings) -> None:
    """ONCEONLY_MODEL_RPM/TPM hold for the group: at every rebalance, this worker takes the
    share of the partitions it owns (zero from the drain that revokes them: :func:`drain`)."""

    async def on_rebalance_complete(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        assigned = app.consumer.assignment()
        share = owned_share(assigned, settings.deliveries_topic, settings.partitions)
        set_model_share(router.parts, share)

    app.on_rebalance_complete.connect(on_rebalance_complete)


def set_model_share(parts: Any, share: float) -> None:
    """This worker's share of the model's budget, paced and shown (``onceonly_model_share``)."""
    parts.writer.admission.set_share(share)
    parts.metrics.model_share.set(share)


async def drain(parts: Any, grace_s: float) -> None:
    """A rebalance revokes this worker's partitions (or it stops): from now no writer call
    starts on their share of the model's budget, until the rebalance completes with the
    worker's new share (the calls' records are read again by the partitions' next owner,
    which paces them from then on: testkit/sim/rates.py found the group over its rate
    without it); the lanes get ``grace_s`` to finish, then what is left is dropped."""
    set_model_share(parts, 0.0)
    await parts.lanes.drain(grace_s)


async def render_metrics(registry: Any) -> bytes:
    """The Prometheus page, rendered in a thread: the lag gauge asks the broker (blocking
    calls of up to seconds), which must never stall the event loop the lanes run on."""
    from prometheus_client import generate_latest

    return await asyncio.to_thread(generate_latest, registry)

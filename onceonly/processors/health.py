"""Endpoint health: AgentMail disables a failing webhook after ~5 days, silently."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from onceonly.processors.mail.protocol import MailClient
from onceonly.processors.metrics import WorkerMetrics

log = structlog.get_logger("onceonly.worker")


@dataclass(slots=True)
class WebhookHealth:
    """The last reading of the watched webhook, for the operator page (None: not yet read)."""

    webhook_id: str | None
    enabled: bool | None = None
    checked_at: float | None = None  #: epoch seconds of the last successful read
    error: str | None = None  #: why the last read failed (None: it did not)


async def check_webhook(
    webhook_id: str | None,
    sender: MailClient,
    metrics: WorkerMetrics,
    health: WebhookHealth | None = None,
) -> None:
    """Read the webhook's state into ``onceonly_webhook_enabled`` (and ``health``); shout
    when it is off. A client that cannot tell (the dry run) leaves both as they are."""
    if not webhook_id:
        return
    try:
        enabled = await sender.webhook_enabled(webhook_id)
    except Exception as exc:  # the poll must never take the worker down
        log.warning("could not read the AgentMail webhook", webhook_id=webhook_id, error=repr(exc))
        if health is not None:
            health.error = repr(exc)
        return
    if enabled is None:
        return
    metrics.webhook_enabled.set(1 if enabled else 0)
    if health is not None:
        health.enabled, health.checked_at, health.error = enabled, time.time(), None
    if not enabled:
        log.error(
            "AGENTMAIL WEBHOOK IS DISABLED: deliveries have stopped and missed events "
            "will not be redelivered; re-enable it, then run onceonly catch-up",
            webhook_id=webhook_id,
        )

"""Endpoint health: AgentMail disables a failing webhook after ~5 days, silently."""

from __future__ import annotations

from typing import Any

import structlog

from processors.metrics import WorkerMetrics

log = structlog.get_logger("onceonly.worker")


async def check_webhook(webhook_id: str | None, sender: Any, metrics: WorkerMetrics) -> None:
    """Read the webhook's state into ``onceonly_webhook_enabled``; shout when it is off."""
    client = getattr(sender, "client", None)
    if not webhook_id or client is None:
        return
    try:
        webhook = await client.webhooks.get(webhook_id)
    except Exception as exc:  # the poll must never take the worker down
        log.warning("could not read the AgentMail webhook", webhook_id=webhook_id, error=repr(exc))
        return
    enabled = bool(getattr(webhook, "enabled", False))
    metrics.webhook_enabled.set(1 if enabled else 0)
    if not enabled:
        log.error(
            "AGENTMAIL WEBHOOK IS DISABLED: deliveries have stopped and missed events "
            "will not be redelivered; re-enable it, then run onceonly catch-up",
            webhook_id=webhook_id,
        )

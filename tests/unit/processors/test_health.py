"""The webhook poll leaves what it read for the operator page, as well as in the gauge; it
asks the provider's mail client (the protocol's ``webhook_enabled``), each provider its own
way, and a dry run reads nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from onceonly.processors.health import WebhookHealth, check_webhook
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.mail.nylas.dry_run import NylasDryRun
from onceonly.processors.mail.nylas.sender import NylasSender
from onceonly.processors.mail.outbox import DryRunOutbox
from onceonly.processors.metrics import WorkerMetrics


class _Webhooks:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def get(self, webhook_id: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _sender(answer: Any) -> AgentMailSender:
    return AgentMailSender("key", client=SimpleNamespace(webhooks=_Webhooks(answer)))  # type: ignore[arg-type]


def _gauge(metrics: WorkerMetrics) -> float | None:
    return metrics.registry.get_sample_value("onceonly_webhook_enabled")


async def test_a_read_records_the_state_and_clears_an_earlier_error() -> None:
    health = WebhookHealth("wh_1", error="ConnectError()")

    await check_webhook("wh_1", _sender(SimpleNamespace(enabled=False)), WorkerMetrics(), health)

    assert (health.enabled, health.error) == (False, None)
    assert health.checked_at is not None


async def test_a_failed_read_keeps_the_last_state_and_says_why() -> None:
    health = WebhookHealth("wh_1", enabled=True, checked_at=5.0)

    await check_webhook("wh_1", _sender(TimeoutError("slow")), WorkerMetrics(), health)

    assert (health.enabled, health.checked_at) == (True, 5.0)
    assert health.error == "TimeoutError('slow')"


async def test_a_dry_run_reads_nothing_and_leaves_the_health_unread() -> None:
    health, metrics = WebhookHealth("wh_1"), WorkerMetrics(watch_webhook=True)
    metrics.webhook_enabled.set(1)

    await check_webhook("wh_1", NylasDryRun(DryRunOutbox()), metrics, health)

    assert (health.enabled, health.checked_at, health.error) == (None, None, None)
    assert _gauge(metrics) == 1.0  # not reported off


@pytest.mark.parametrize(
    ("status", "enabled"),
    [("active", True), ("failing", True), ("failed", False), ("pause", False)],
)
async def test_a_nylas_webhook_is_on_while_nylas_delivers_to_it(status: str, enabled: bool) -> None:
    found = SimpleNamespace(data=SimpleNamespace(status=status))
    client = SimpleNamespace(webhooks=SimpleNamespace(find=lambda webhook_id: found))
    health, metrics = WebhookHealth("wh_1"), WorkerMetrics(watch_webhook=True)

    await check_webhook("wh_1", NylasSender("key", client=client), metrics, health)

    assert health.enabled is enabled
    assert _gauge(metrics) == (1.0 if enabled else 0.0)

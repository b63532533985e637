"""The webhook poll leaves what it read for the operator page, as well as in the gauge."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from onceonly.processors.health import WebhookHealth, check_webhook
from onceonly.processors.metrics import WorkerMetrics


class _Webhooks:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def get(self, webhook_id: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _sender(answer: Any) -> Any:
    return SimpleNamespace(client=SimpleNamespace(webhooks=_Webhooks(answer)))


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

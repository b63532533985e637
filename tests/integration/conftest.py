"""Fixtures of the worker and operations tests: the AgentMail server and whole stacks."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from onceonly.foundation.kafka import AsyncProducer
from onceonly.foundation.settings import Settings
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.integration.workers import Stack


@pytest.fixture
def mail() -> Iterator[FakeAgentMail]:
    with FakeAgentMail().serving_in_thread() as fake:
        yield fake


@pytest.fixture
async def stack_factory(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
    producer_factory: Callable[[Settings], AsyncProducer],
    mail: FakeAgentMail,
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(**overrides: Any) -> Stack:
        values = {
            "partitions": 4,
            "reorder_window_ms": 1000,
            "app_id": f"onceonly-{uuid.uuid4().hex[:6]}",
        }
        values.update(overrides)
        settings = topics_factory(settings_factory(**values))
        stack = Stack(settings, producer_factory(settings), mail, tmp_path)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        for worker in stack.workers:
            worker.kill()

"""Fixtures of the worker and operations tests: the AgentMail server and whole stacks."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from onceonly.foundation.kafka import AsyncProducer
from onceonly.foundation.settings import Settings
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.integration.workers import Stack, dead_lettered


@pytest.fixture
def mail() -> Iterator[FakeAgentMail]:
    with FakeAgentMail().serving_in_thread() as fake:
        yield fake


@pytest.fixture
def stack_settings(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
) -> Callable[..., Settings]:
    """Settings of a whole stack, its topics created: four partitions, a 1 s reorder
    window and an app id of its own, unless ``overrides`` say otherwise."""

    def make(**overrides: Any) -> Settings:
        values = {
            "partitions": 4,
            "reorder_window_ms": 1000,
            "app_id": f"onceonly-{uuid.uuid4().hex[:6]}",
        }
        return topics_factory(settings_factory(**values | overrides))

    return make


@pytest.fixture
async def dead_letter_stack(stack_factory: Callable[..., Stack]) -> Stack:
    """A stack (no reorder window, one send attempt) whose one worker has dead-lettered the
    reply to ``<dl@example.com>`` (thread ``thr-dl``); the mail API is up again."""
    stack = stack_factory(reorder_window_ms=0, send_attempts=1)
    stack.worker()
    await dead_lettered(stack, "<dl@example.com>", "thr-dl")
    return stack


@pytest.fixture
async def stack_of(
    stack_settings: Callable[..., Settings],
    producer_factory: Callable[[Settings], AsyncProducer],
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Any]]:
    """Whole stacks: ``stack_of(kind, mail, **overrides)`` makes a ``kind`` (:class:`Stack`
    or a subclass) on the mail fake ``mail``; their workers are killed after the test."""
    stacks: list[Stack] = []

    def make(kind: type[Stack], mail: Any, **overrides: Any) -> Stack:
        settings = stack_settings(**overrides)
        stack = kind(settings, producer_factory(settings), mail, tmp_path)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        for worker in stack.workers:
            worker.kill()


@pytest.fixture
def stack_factory(mail: FakeAgentMail, stack_of: Callable[..., Stack]) -> Callable[..., Stack]:
    """Stacks on the fake AgentMail, ``overrides`` on :func:`stack_settings`."""
    return functools.partial(stack_of, Stack, mail)

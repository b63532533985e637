"""Catch-up at size on the real broker, the real AgentMail SDK and the AgentMail fake: every
lost message queued exactly once, none already answered, and no HTTP session left open."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from bench._catchup_seed import answer, message_id, queued, seed_inbox
from onceonly.operations import catchup
from tests.integration.workers import INBOX, Stack, onceonly

pytestmark = pytest.mark.integration

LOST = 300
ANSWERED = range(0, LOST, 10)  # every tenth was answered before the outage ended


async def test_every_lost_message_is_queued_once_and_none_already_answered(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    first = seed_inbox(stack.mail, INBOX, LOST)
    await answer(stack.settings, INBOX, ANSWERED)
    since = datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%dT%H:%M:%S")

    done = onceonly(stack, "catch-up", "--inbox", INBOX, "--since", since, "--wait-s", "0")

    assert done.returncode == 0, done.stderr + done.stdout
    expected = {message_id(n) for n in range(LOST) if n not in ANSWERED}
    on_topic = queued(stack.settings)
    assert set(on_topic) == expected  # none answered, none missing
    assert set(on_topic.values()) == {1}  # each exactly once
    assert f"found {LOST}," in done.stdout
    assert f"({0} sent by the agent, {len(ANSWERED)} already answered)" in done.stdout
    assert "Unclosed" not in done.stderr + done.stdout


async def test_a_catch_up_leaves_no_http_session_open(stack_factory: Callable[..., Stack]) -> None:
    """The AgentMail SDK over aiohttp: a session not closed warns "Unclosed client session"
    (a ResourceWarning) when it is collected; none may."""
    stack = stack_factory()
    seed_inbox(stack.mail, INBOX, 5)
    settings = stack.settings.model_copy(
        update={"agentmail_api_key": SecretStr("k"), "agentmail_base_url": stack.mail.base_url}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = catchup.source_for(settings, INBOX, None)
        summary = await catchup.feed_unanswered(
            settings, source, datetime(2000, 1, 1, tzinfo=UTC), catchup.Answered()
        )
        del source
        gc.collect()

    assert summary.found == 5 and len(summary.fed) == 5  # the session was used
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []

"""The fake servers the processor tests talk to, each served for one test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.openai_server import FakeChatModel


@pytest.fixture
async def mail() -> AsyncIterator[FakeAgentMail]:
    """A fake AgentMail API on this test's loop."""
    async with FakeAgentMail().serving() as fake:
        yield fake


@pytest.fixture
async def model() -> AsyncIterator[FakeChatModel]:
    """A fake OpenAI chat-completions API on this test's loop (it answers "Thanks for your
    message.")."""
    async with FakeChatModel().serving() as fake:
        yield fake

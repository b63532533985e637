"""The fake servers the processor tests talk to, each served for one test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.openai_server import FakeChatModel


@pytest.fixture
async def mail() -> AsyncIterator[FakeAgentMail]:
    """A fake AgentMail API on this test's loop."""
    fake = FakeAgentMail()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def model() -> AsyncIterator[FakeChatModel]:
    """A fake OpenAI chat-completions API on this test's loop (it answers "Thanks for your
    message.")."""
    fake = FakeChatModel()
    await fake.start()
    yield fake
    await fake.stop()

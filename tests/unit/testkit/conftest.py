"""The AgentMail SDK's client, pointed at the module's ``fake`` server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from agentmail import AsyncAgentMail

from testkit.fakes.agentmail_server import FakeAgentMail


@pytest.fixture
async def client(fake: FakeAgentMail) -> AsyncIterator[AsyncAgentMail]:
    async with httpx.AsyncClient(timeout=5.0) as http:
        yield AsyncAgentMail(api_key="test-key", environment=fake.environment, httpx_client=http)

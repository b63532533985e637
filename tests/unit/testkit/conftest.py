"""The AgentMail SDK's client, pointed at the module's ``fake`` server; the simulator's
logs off for the modules that ask (``sim_quiet``); schedules as the seeds a test keeps were
found (``as_found``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from agentmail import AsyncAgentMail

from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.sim.__main__ import quieted
from testkit.sim.schedule import Cuts, Reorder, Replays
from testkit.sim.world import World


@pytest.fixture
async def client(fake: FakeAgentMail) -> AsyncIterator[AsyncAgentMail]:
    async with httpx.AsyncClient(timeout=5.0) as http:
        yield AsyncAgentMail(api_key="test-key", environment=fake.environment, httpx_client=http)


@pytest.fixture
def sim_quiet() -> Iterator[None]:
    """The product's logs off while a test plays schedules: they cost more than the simulation."""
    with quieted():
        yield


@pytest.fixture
def before_read_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut from the mail API holding its sends alone, not the thread and message reads, as
    every schedule played before finding F43 was fixed (``--no-read-cuts``)."""
    monkeypatch.setattr(Cuts, "reads", False)


@pytest.fixture
def before_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """No member cut off from the broker and every restart on a new host, as every schedule
    played before those were simulated (the seeds a test keeps from then)."""
    monkeypatch.setattr(World, "same_disk", False)
    monkeypatch.setattr(Cuts, "on", False)


@pytest.fixture
def as_found(monkeypatch: pytest.MonkeyPatch, before_cuts: None) -> None:
    """Every schedule as the seeds a test keeps were found: at reorder window 0 and without
    the operator's replays (each drawn for half the seeds since they were simulated), and
    as :func:`before_cuts`; restored after the test, whatever a command the test ran set
    (``--window``, ``--no-replays``, ``--no-cuts``, ``--no-same-disk``)."""
    monkeypatch.setattr(Reorder, "mode", "off")
    monkeypatch.setattr(Replays, "on", False)

"""A worker's Conversation with only the parts a unit test gives it (no faust, no broker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from onceonly.processors.conversation import Conversation
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.metrics import WorkerMetrics
from onceonly.processors.parts import WorkerParts
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.ledger import MemoryLedger
from tests.conftest import TEST_LEDGER_RETENTION


def bare_pipeline(settings: Any, **parts: Any) -> Conversation:
    """A Conversation over ``settings`` and ``parts``; every other collaborator is absent."""
    absent: Any = None
    given: dict[str, Any] = {
        "events": {},
        "holds": absent,
        "ledger": absent,
        "channels": {},
        "writer": absent,
        "dead_letters": absent,
        "deliveries": absent,
        "metrics": absent,
        "lanes": absent,
        "sweeper": absent,
        **parts,
    }
    return Conversation(WorkerParts(settings=settings, **given))


def mail_pipeline(mail: FakeAgentMail, approval: str, **parts: Any) -> Conversation:
    """A Conversation that replies through the fake AgentMail ``mail`` under
    ``ONCEONLY_APPROVAL=approval``: a memory ledger, fresh metrics, no reorder window, two
    send attempts; ``parts`` (the writer, the dead letters, ...) as the test gives them."""
    settings = SimpleNamespace(
        reorder_window_ms=0,
        send_attempts=2,
        send_in_flight_wait_s=60.0,
        supersede_max=2,
        approval=approval,
        tenant_key="inbox",
        # the messages carry fixed dates (2026-11-29): never past the ledger's retention
        ledger_retention=TEST_LEDGER_RETENTION,
    )
    sender = AgentMailSender("key", base_url=mail.base_url, timeout_s=5)
    channels = {"agentmail": AgentMailChannel(sender)}
    given = {"ledger": MemoryLedger(), "channels": channels, "metrics": WorkerMetrics()}
    return bare_pipeline(settings, **given | parts)

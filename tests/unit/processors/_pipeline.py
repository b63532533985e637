"""A worker's Conversation with only the parts a unit test gives it (no faust, no broker)."""

from __future__ import annotations

from typing import Any

from onceonly.processors.conversation import Conversation
from onceonly.processors.parts import WorkerParts


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

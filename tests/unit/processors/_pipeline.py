"""A worker Pipeline with only the parts a unit test gives it (no faust, no broker)."""

from __future__ import annotations

from typing import Any

from onceonly.processors.pipeline import Pipeline


def bare_pipeline(settings: Any, **parts: Any) -> Pipeline:
    """``Pipeline`` with ``settings`` and ``parts``; every other collaborator is absent."""
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
    return Pipeline(settings=settings, **given)

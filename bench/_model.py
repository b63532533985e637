"""A model-like reply writer, ``bench._model:writer``: ``random.uniform(0.8, 1.2)`` s, no CPU;
a message whose text holds :data:`HANG` never answers (the worker's writer timeout ends it)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Protocol

#: A message whose text contains this is never answered by the writer.
HANG = "HANG"
#: The writer's latency: uniform between these, in seconds (mean 1 s).
LATENCY_S = (0.8, 1.2)


class _Message(Protocol):
    @property
    def message_id(self) -> str: ...

    @property
    def text(self) -> str | None: ...


async def writer(burst: Sequence[_Message]) -> str:
    """Sleep like a model call (or far past any timeout on a HANG message); a short reply."""
    latest = burst[-1]
    if HANG in (latest.text or ""):
        await asyncio.sleep(3600)
    await asyncio.sleep(random.uniform(*LATENCY_S))
    return f"Thanks for your message {latest.message_id}; we are on it."

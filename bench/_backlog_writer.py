"""The backlog benchmark's reply writer, ``bench._backlog_writer:writer``: sleeps exactly
:data:`WRITER_S_ENV` seconds (1 s when unset), so the drain's floor is
``threads x seconds / ONCEONLY_WRITER_CONCURRENCY``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from bench._model import _Message

#: The environment variable that holds the writer's latency in seconds.
WRITER_S_ENV = "BENCH_BACKLOG_WRITER_S"


def latency_s() -> float:
    """The writer's latency: :data:`WRITER_S_ENV`, 1 s when unset."""
    return float(os.environ.get(WRITER_S_ENV) or 1.0)


async def writer(burst: Sequence[_Message]) -> str:
    """Sleep like a model call of a fixed latency; a short reply."""
    await asyncio.sleep(latency_s())
    return f"Thanks for your message {burst[-1].message_id}; we are on it."

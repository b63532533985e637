"""The benchmarks' model-like reply writers (standard library only: the DBOS app imports them
too), none spending CPU:

- ``bench._model:writer``: ``random.uniform(0.8, 1.2)`` s; a message whose text holds
  :data:`HANG` never answers (the worker's writer timeout ends it);
- ``bench._model:counted``: the same, each call noted in the file named by :data:`CALLS_ENV`
  (``<pid> start <message_id>``, then ``<pid> done <message_id>``; ``O_APPEND``, one write a
  line: a SIGKILL loses nothing), so the DBOS comparison counts model calls across a kill;
- ``bench._model:fixed``: exactly :data:`WRITER_S_ENV` seconds (1 s when unset), so the
  backlog's drain has a floor of ``threads x seconds / ONCEONLY_WRITER_CONCURRENCY``.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from typing import Protocol

#: A message whose text contains this is never answered by the writer.
HANG = "HANG"
#: The writer's latency: uniform between these, in seconds (mean 1 s).
LATENCY_S = (0.8, 1.2)
#: The environment variable that names the calls file of :func:`counted`.
CALLS_ENV = "BENCH_MODEL_CALLS_FILE"
#: The environment variable that holds :func:`fixed`'s latency in seconds.
WRITER_S_ENV = "BENCH_BACKLOG_WRITER_S"


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


def note(kind: str, message_id: str) -> None:
    """Append ``<pid> <kind> <message_id>`` to the calls file, if one is named."""
    path = os.environ.get(CALLS_ENV)
    if not path:
        return
    line = f"{os.getpid()} {kind} {message_id}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


async def counted(burst: Sequence[_Message]) -> str:
    """:func:`writer`, its start and its return written down."""
    message_id = burst[-1].message_id
    note("start", message_id)
    text = await writer(burst)
    note("done", message_id)
    return text


async def fixed(burst: Sequence[_Message]) -> str:
    """Sleep like a model call of a fixed latency; a short reply."""
    await asyncio.sleep(float(os.environ.get(WRITER_S_ENV) or 1.0))
    return f"Thanks for your message {burst[-1].message_id}; we are on it."

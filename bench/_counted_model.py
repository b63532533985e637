"""``bench._counted_model:writer``: the model-like writer of ``bench._model``, every call noted.

Each call appends ``<pid> start <message_id>`` and ``<pid> done <message_id>`` to the file
named by :data:`CALLS_ENV` (``O_APPEND``, one write per line: a SIGKILL loses nothing), so
the DBOS comparison counts model calls across a kill. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bench import _model

#: The environment variable that names the calls file.
CALLS_ENV = "BENCH_MODEL_CALLS_FILE"


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


async def writer(burst: Sequence[_model._Message]) -> str:
    """:func:`bench._model.writer`, its start and its return written down."""
    message_id = burst[-1].message_id
    note("start", message_id)
    text = await _model.writer(burst)
    note("done", message_id)
    return text

"""Reply writers loaded by worker processes in tests (ONCEONLY_REPLY_WRITER)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence

from processors.reply import Inbound


def unique(burst: Sequence[Inbound]) -> str:
    """A text that differs on every call, so a second call could never pass unnoticed."""
    text = f"reply {uuid.uuid4().hex} to {len(burst)} message(s) of {burst[-1].message_id}"
    log = os.environ.get("ONCEONLY_TEST_WRITER_LOG")
    if log:
        with open(log, "a") as out:
            out.write(text + "\n")
    return text

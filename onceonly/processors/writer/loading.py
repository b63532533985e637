"""Reply writers. ``ONCEONLY_REPLY_WRITER="module:function"`` picks one; sync or async.

A writer is given the whole burst (one thread's messages released together, oldest
first) and returns the reply text. It is called once per reply: its text is recorded
before the send, so a model is never asked twice for the same message.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from onceonly.foundation.errors import ConfigError
from onceonly.processors.writer.contract import Inbound, ReplyWriter


def acknowledge(burst: Sequence[Inbound]) -> str:
    """The default: a plain acknowledgement naming what was received."""
    latest = burst[-1]
    subject = f' about "{latest.subject}"' if latest.subject else ""
    count = "your message" if len(burst) == 1 else f"your {len(burst)} messages"
    return (
        f"Hello,\n\nThank you for {count}{subject}. We have received it and will get back "
        "to you shortly.\n\n-- sent once by onceonly"
    )


def load_callable(spec: str, variable: str) -> Any:
    """Import ``module:function``; a bad spec is a ConfigError naming the variable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"{variable}={spec!r} is not 'module:function' "
            "(e.g. onceonly.processors.writer:acknowledge)"
        )
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{variable}={spec!r} cannot be loaded: {exc}") from exc
    if not callable(found):
        raise ConfigError(f"{variable}={spec!r} is not callable")
    return found


def load_writer(spec: str) -> ReplyWriter:
    return load_callable(spec, "ONCEONLY_REPLY_WRITER")  # type: ignore[no-any-return]

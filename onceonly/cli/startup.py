"""What every command does first (read the settings once, set up logging from them), and\nhow a
long-running one runs until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any

from onceonly.foundation.logs import configure_logging
from onceonly.foundation.settings import Settings


def settings_from_env() -> Settings:
    """``Settings.from_env()``, then logging configured as they say."""
    settings = Settings.from_env()
    configure_logging(settings.log_level, json=settings.log_json)
    return settings


def run_until_signal(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine until SIGINT or SIGTERM, then cancel it and let it clean up."""

    async def runner() -> None:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(runner())

"""What every part of a chaos run shares: paths, names, sizes, the clock."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from onceonly.foundation.settings import DEFAULT_TOPICS

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "chaos" / "results"
APP_ID = "onceonly-chaos"
PARTITIONS = 8
DELIVERIES_TOPIC = DEFAULT_TOPICS["deliveries"]
LEDGER_TOPIC = DEFAULT_TOPICS["ledger"]
DEAD_LETTER_TOPIC = DEFAULT_TOPICS["dead_letters"]
PRODUCE_TIMEOUT_MS = 3000
SEND_ATTEMPTS = 12


CATCH_UP_LINE = re.compile(
    r"found (\d+), answered (\d+), skipped (\d+) \((\d+) sent by the agent, (\d+) already "
    r"answered\), past the ledger's retention \d+, pending (\d+)"
)


class ChaosError(Exception):
    """The run could not be carried out (not a verdict): exit 2."""


def now() -> float:
    return time.monotonic()


def iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


async def first_of(main: Awaitable[Any], background: Iterable[asyncio.Task[Any]]) -> Any:
    """Await ``main``; if a background task fails first (a fatal death), raise its error."""
    task = asyncio.ensure_future(main)
    watched = [task, *background]
    while True:
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        for finished in done:
            if finished is not task and finished.exception() is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise finished.exception()  # type: ignore[misc]
        if task in done:
            return task.result()
        watched = [t for t in watched if t not in done]

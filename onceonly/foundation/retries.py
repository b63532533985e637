"""A call under a tenacity retry policy whose policy is built only once a try has failed.

Most calls (a send, a writer call) succeed the first time, and ``async for attempt in
AsyncRetrying(...)`` costs about 45 µs for that one try (the policy, its statistics, a
call state and an attempt object), a few per cent of a reply's CPU and about a tenth of a
simulated schedule's. :func:`retried` makes the first try itself; only when it raises an
``Exception`` does it build the policy and hand that failure to tenacity as its first
attempt's outcome (re-raised inside the attempt), so stop, wait and retry see the same
attempt numbers, exceptions and order as a plain tenacity loop: tests/unit/foundation/
test_retries.py runs both on the same failures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying

__all__ = ["retried"]

T = TypeVar("T")


async def retried(policy: Callable[[], AsyncRetrying], attempt: Callable[[], Awaitable[T]]) -> T:
    """``await attempt()``, retried as ``policy()`` says once it has failed.

    A ``BaseException`` that is not an ``Exception`` (a cancellation) propagates from the
    first try: give policies that retry exceptions of ``Exception`` only, with ``reraise=True``."""
    try:
        return await attempt()
    except Exception as exc:
        first: Exception | None = exc
    async for trying in policy():
        with trying:
            if first is not None:
                failed, first = first, None
                raise failed
            return await attempt()
    raise AssertionError("unreachable: tenacity returns the result or raises")  # pragma: no cover

"""retried: tenacity's policy, built only after a failed first try, sees what a plain
tenacity loop sees."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_none

from onceonly.foundation.retries import retried


class Flaky(Exception):
    pass


class Fatal(Exception):
    pass


def _policy(seen: list[tuple[int, str]], attempts: int = 3) -> AsyncRetrying:
    def stop(state: RetryCallState) -> bool:
        assert state.outcome is not None
        seen.append((state.attempt_number, repr(state.outcome.exception())))
        return state.attempt_number >= attempts

    return AsyncRetrying(
        stop=stop, wait=wait_none(), retry=retry_if_exception_type(Flaky), reraise=True
    )


def _failing(*errors: Exception) -> Callable[[], Awaitable[str]]:
    """An attempt that raises ``errors`` in turn, then answers how many tries it took."""
    tries = 0

    async def attempt() -> str:
        nonlocal tries
        tries += 1
        if tries <= len(errors):
            raise errors[tries - 1]
        return f"done after {tries}"

    return attempt


async def _plain(policy: AsyncRetrying, attempt: Callable[[], Awaitable[str]]) -> str:
    async for trying in policy:
        with trying:
            return await attempt()
    raise AssertionError("unreachable")


async def test_a_first_try_that_succeeds_builds_no_policy() -> None:
    def policy() -> AsyncRetrying:
        raise AssertionError("the policy was built for a call that did not fail")

    assert await retried(policy, _failing()) == "done after 1"


async def test_failures_reach_the_policy_with_the_attempt_numbers_of_a_plain_loop() -> None:
    errors = (Flaky("one"), Flaky("two"))
    plain: list[tuple[int, str]] = []
    ours: list[tuple[int, str]] = []

    assert await _plain(_policy(plain), _failing(*errors)) == "done after 3"
    assert await retried(lambda: _policy(ours), _failing(*errors)) == "done after 3"
    assert ours == plain == [(1, "Flaky('one')"), (2, "Flaky('two')")]


async def test_the_last_failure_is_raised_when_the_policy_stops() -> None:
    errors = (Flaky("one"), Flaky("two"), Flaky("three"), Flaky("four"))
    seen: list[tuple[int, str]] = []

    with pytest.raises(Flaky) as raised:
        await retried(lambda: _policy(seen, attempts=2), _failing(*errors))

    assert raised.value is errors[1]
    assert [number for number, _ in seen] == [1, 2]


async def test_a_failure_the_policy_does_not_retry_is_raised_as_it_was() -> None:
    fatal = Fatal("no")
    seen: list[tuple[int, str]] = []

    with pytest.raises(Fatal) as raised:
        await retried(lambda: _policy(seen), _failing(fatal))

    assert raised.value is fatal and seen == []  # retry said no: stop was never asked


async def test_a_cancelled_first_try_propagates_without_the_policy() -> None:
    async def cancelled() -> str:
        raise asyncio.CancelledError

    def policy() -> AsyncRetrying:
        raise AssertionError("the policy was built for a cancellation")

    with pytest.raises(asyncio.CancelledError):
        await retried(policy, cancelled)

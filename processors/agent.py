"""The agent step: the user's reply writer, treated as the slow, fallible model call it is.

A writer is ``ONCEONLY_REPLY_WRITER="module:function"``, sync or async. It is given a
:class:`Burst` (a sequence of the thread's new messages, oldest first, plus what a model
needs: the thread's history on request and keyed effects) and returns one of:

* a non-empty ``str``: the reply text, recorded in the ledger before it is sent;
* ``None`` or :class:`Decline` ``(reason)``: no reply; the ledger records *declined* and
  the model is never asked again for that message;
* :class:`Draft` ``(text, reason)``: a reply a person approves first
  (``ONCEONLY_APPROVAL``, :mod:`processors.approvals`): recorded *awaiting approval*;
* it raises, or runs past ``ONCEONLY_WRITER_TIMEOUT_S``: retried with backoff up to
  ``ONCEONLY_WRITER_ATTEMPTS`` calls, then :class:`WriterFailed` (the worker
  dead-letters the burst with reason ``writer_failed`` and goes on).

At most ``ONCEONLY_WRITER_CONCURRENCY`` calls are in flight per worker (the knob for a
model's rate limit); a sync writer runs in a thread pool of that size, never on the
event loop, so heartbeats, ticks and other conversations go on while it runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, overload

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from processors.exceptions import ProcessorError, Rebalancing, WriterFailed
from processors.messages import Decline, Draft, Inbound, ThreadMessage

log = structlog.get_logger("onceonly.agent")


class WriterTimeout(ProcessorError):
    """One writer call ran past ``ONCEONLY_WRITER_TIMEOUT_S``."""


class _NotRetryable(ProcessorError):
    """The writer returned something that is neither text, None nor a Decline."""


History = Callable[[], Awaitable[Sequence[ThreadMessage]]]


async def _no_history() -> Sequence[ThreadMessage]:
    return ()


@dataclass(frozen=True, eq=False)
class Burst(Sequence[Inbound]):
    """What a writer is given: the messages to answer (a sequence, oldest first), and more.

    ``await burst.history()`` reads the thread's earlier messages from the mail API (the
    agent's own replies included) on the first call only; a writer that never calls it
    costs no API call. ``burst.effects.once(action, payload, perform)`` performs an
    effect once per answered message and action (see :mod:`processors.effects`).
    Sync writers (run in a thread) use ``history_sync()`` and ``effects.once_sync``.
    """

    messages: tuple[Inbound, ...]
    effects: Any = None
    attempt: int = 1
    _read_history: History = _no_history
    _loop: asyncio.AbstractEventLoop | None = None
    _cache: list[Sequence[ThreadMessage]] = field(default_factory=list)

    @overload
    def __getitem__(self, index: int) -> Inbound: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Inbound]: ...
    def __getitem__(self, index: int | slice) -> Inbound | Sequence[Inbound]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Inbound]:
        return iter(self.messages)

    @property
    def latest(self) -> Inbound:
        return self.messages[-1]

    async def history(self) -> Sequence[ThreadMessage]:
        if not self._cache:
            self._cache.append(tuple(await self._read_history()))
        return self._cache[0]

    def history_sync(self) -> Sequence[ThreadMessage]:
        """``history()`` for a sync writer, which runs in a thread beside the event loop."""
        if self._loop is None:
            raise RuntimeError("history_sync() is for sync writers run by the worker")
        return asyncio.run_coroutine_threadsafe(self.history(), self._loop).result()


Written = str | Decline | Draft
UserWriter = Callable[[Burst], Any]


def outcome_of(value: Any) -> Written:
    """A writer's return value as text or a Decline; anything else is the writer's bug."""
    if value is None:
        return Decline("the writer returned None")
    if isinstance(value, Decline):
        return value
    if isinstance(value, Draft) and isinstance(value.text, str) and value.text.strip():
        return value
    if isinstance(value, str) and value.strip():
        return value
    raise _NotRetryable(
        f"the reply writer returned {type(value).__name__} {str(value)[:40]!r}; "
        "return a non-empty str, None or Decline(reason), or Draft(text, reason)"
    )


def _retryable(exc: BaseException) -> bool:
    """A writer call that failed is tried again; one that was cancelled (a drain) or fenced
    never is: tenacity's attempts catch every BaseException, CancelledError included."""
    return isinstance(exc, Exception) and not isinstance(exc, _NotRetryable | Rebalancing)


def is_async(writer: Callable[..., Any]) -> bool:
    call = getattr(writer, "__call__", None)  # noqa: B004 - an instance with async __call__
    return inspect.iscoroutinefunction(writer) or inspect.iscoroutinefunction(call)


@dataclass(frozen=True, slots=True)
class WriterPolicy:
    concurrency: int = 64
    timeout_s: float = 120.0
    attempts: int = 3
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0


class Writer:
    """Runs a user's writer under the policy: bounded, timed out, retried, off the loop."""

    def __init__(
        self,
        writer: UserWriter,
        policy: WriterPolicy = WriterPolicy(),
        *,
        on_call: Callable[[str, float], None] = lambda outcome, seconds: None,
    ) -> None:
        self.writer = writer
        self.policy = policy
        self.on_call = on_call
        self._async = is_async(writer)
        self._slots = asyncio.Semaphore(policy.concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self.in_flight = 0

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.policy.concurrency, thread_name_prefix="onceonly-writer"
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _call_once(self, burst: Burst) -> Written:
        async with self._slots:
            self.in_flight += 1
            started = time.monotonic()
            outcome = "error"
            try:
                if self._async:
                    call: Awaitable[Any] = self.writer(burst)
                else:
                    # the writer's thread runs in this task's context, so what it asks of
                    # the loop (``effects.once_sync``) is done for the record being answered
                    loop = asyncio.get_running_loop()
                    run = functools.partial(contextvars.copy_context().run, self.writer, burst)
                    call = loop.run_in_executor(self._executor(), run)
                try:
                    value = await asyncio.wait_for(call, self.policy.timeout_s)
                except TimeoutError:
                    outcome = "timeout"
                    raise WriterTimeout(
                        f"the reply writer ran past {self.policy.timeout_s:g} s "
                        "(ONCEONLY_WRITER_TIMEOUT_S)"
                    ) from None
                if inspect.isawaitable(value):  # a sync function that returned a coroutine
                    value = await asyncio.wait_for(value, self.policy.timeout_s)
                written = outcome_of(value)
                outcome = "declined" if isinstance(written, Decline) else "written"
                outcome = "drafted" if isinstance(written, Draft) else outcome
                return written
            finally:
                self.in_flight -= 1
                self.on_call(outcome, time.monotonic() - started)

    async def write(
        self,
        messages: Sequence[Inbound],
        *,
        effects: Any = None,
        history: History = _no_history,
        ids: Mapping[str, Any] | None = None,
    ) -> Written:
        """The reply text or a Decline; raises :class:`WriterFailed` after the last attempt."""
        loop = asyncio.get_running_loop()
        cache: list[Sequence[ThreadMessage]] = []  # history read once, whatever the attempts
        attempt = 0
        try:
            async for retry in AsyncRetrying(
                stop=stop_after_attempt(self.policy.attempts),
                wait=wait_random_exponential(
                    multiplier=self.policy.backoff_initial_s, max=self.policy.backoff_max_s
                ),
                retry=retry_if_exception(_retryable),
                reraise=True,
            ):
                with retry:
                    attempt += 1
                    if attempt > 1:
                        log.warning("writer retry", attempt=attempt, **(ids or {}))
                    burst = Burst(tuple(messages), effects, attempt, history, loop, cache)
                    return await self._call_once(burst)
        except (asyncio.CancelledError, Rebalancing):
            raise
        except Exception as exc:
            raise WriterFailed(
                f"the reply writer failed {attempt} time(s); last error: {exc!r}",
                attempts=attempt,
                last_error=repr(exc),
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

"""The agent step: the user's reply writer, treated as the slow, fallible model call it is.

A writer is ``ONCEONLY_REPLY_WRITER="module:function"``, sync or async. It is given a
:class:`Burst` (a sequence of the thread's new messages, oldest first, plus what a model
needs: the thread's history on request and keyed effects) and returns one of:

* a non-empty ``str``: the reply text, recorded in the ledger before it is sent;
* ``None`` or :class:`Decline` ``(reason)``: no reply; the ledger records *declined* and
  the model is never asked again for that message;
* :class:`Draft` ``(text, reason)``: a reply a person approves first
  (``ONCEONLY_APPROVAL``, :mod:`onceonly.processors.approval.decisions`): recorded *awaiting
  approval*;
* it raises, or runs past ``ONCEONLY_WRITER_TIMEOUT_S``: retried with backoff up to
  ``ONCEONLY_WRITER_ATTEMPTS`` calls, then :class:`WriterFailed` (the worker
  dead-letters the burst with reason ``writer_failed`` and goes on).

At most ``ONCEONLY_WRITER_CONCURRENCY`` calls are in flight per worker; a sync writer
runs in a thread pool of that size, never on the event loop, so heartbeats, ticks and
other conversations go on while it runs. Each call is admitted by
:class:`~onceonly.processors.flow.admission.Admission`: free slots to the tenant
served least of late, the group's rate limits, the model's 429 pauses (a 429 with
Retry-After is tried again without counting an attempt, up to ``THROTTLED_MAX`` times).
A writer reports what a call cost with ``burst.report_usage(model, input_tokens,
output_tokens)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, overload

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from onceonly.foundation.retries import retried
from onceonly.processors.exceptions import (
    BrokerUnavailable,
    ProcessorError,
    Rebalancing,
    WriterFailed,
)
from onceonly.processors.flow.admission import Admission, Ticket
from onceonly.processors.flow.rate import model_of, retry_after_s
from onceonly.processors.flow.tenants import current_tenant
from onceonly.processors.writer.contract import Decline, Draft, Inbound, Text, ThreadMessage
from onceonly.schemas.ledger import Usage

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
    effect once per answered message and action (see [`Effects`][onceonly.Effects]).
    Sync writers (run in a thread) use ``history_sync()`` and ``effects.once_sync``.
    """

    messages: tuple[Inbound, ...]
    """The thread's new messages, oldest first; the burst is also a sequence of them."""
    effects: Any = None
    """The [`Effects`][onceonly.Effects] of the answered message (the latest)."""
    attempt: int = 1
    """Which call of the writer this is for the burst: 1, then 2, ... when called again."""
    _read_history: History = _no_history
    _loop: asyncio.AbstractEventLoop | None = None
    _cache: list[Sequence[ThreadMessage]] = field(default_factory=list)
    _usage: list[Usage] = field(default_factory=list)

    def report_usage(self, model: str, input_tokens: int, output_tokens: int) -> None:
        """What this call cost: recorded with the reply, counted by model, charged against
        ``ONCEONLY_MODEL_TPM``. Call it once per model call (a sync writer may too)."""
        self._usage.append(Usage(str(model), int(input_tokens), int(output_tokens)))

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
        """The newest message: the one the reply answers (it covers the others)."""
        return self.messages[-1]

    async def history(self) -> Sequence[ThreadMessage]:
        """The thread's earlier messages, from the mail API; read on the first call only."""
        if not self._cache:
            self._cache.append(tuple(await self._read_history()))
        return self._cache[0]

    def history_sync(self) -> Sequence[ThreadMessage]:
        """``history()`` for a sync writer, which runs in a thread beside the event loop."""
        if self._loop is None:
            raise RuntimeError("history_sync() is for sync writers run by the worker")
        return asyncio.run_coroutine_threadsafe(self.history(), self._loop).result()


Written = str | Decline | Draft


def with_usage(written: Written, usage: Sequence[Usage]) -> Written:
    """The text or Decline carrying the sum of the calls' reported usage (if any)."""
    if not usage or isinstance(written, Draft):
        return written
    total = functools.reduce(lambda a, b: a + b, usage)
    if isinstance(written, Decline):
        return replace(written, usage=total)
    text = Text(written)
    text.usage = total
    return text


UserWriter = Callable[[Burst], Any]
#: 429s with Retry-After one reply may meet before it fails (they count no attempt)
THROTTLED_MAX = 50


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
    never is: tenacity's attempts catch every BaseException, CancelledError included. Nor
    one whose effect's record the broker did not take (the worker's failure: F36)."""
    never = _NotRetryable | Rebalancing | BrokerUnavailable
    return isinstance(exc, Exception) and not isinstance(exc, never)


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
        admission: Admission | None = None,
        on_usage: Callable[[Usage], None] = lambda usage: None,
    ) -> None:
        self.writer = writer
        self.policy = policy
        self.on_call = on_call
        self.on_usage = on_usage
        self._async = is_async(writer)
        self.admission = admission or Admission(policy.concurrency)
        self._pool: ThreadPoolExecutor | None = None

    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

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
        ticket = await self.admission.enter(current_tenant.get())
        started = time.monotonic()
        outcome = "error"
        ok, throttled = False, None
        thread: list[Future[Any]] = []  # a sync call's, in the pool
        try:
            written = await self._run(burst, thread)
            ok = True
            outcome = "declined" if isinstance(written, Decline) else "written"
            outcome = "drafted" if isinstance(written, Draft) else outcome
            return written
        except WriterTimeout:
            outcome = "timeout"
            raise
        except Exception as exc:
            throttled = retry_after_s(exc, time.time())
            if throttled is not None:
                outcome = "throttled"
                self.admission.model = model_of(exc) or self.admission.model
            raise
        finally:
            if thread and not thread[0].done():  # its usage is counted when its thread ends
                self.admission.leave(ticket, ok=ok, retry_after_s=throttled, running=True)
                self._free_when_done(thread[0], ticket, burst)
            else:
                tokens = self._used(burst)
                self.admission.leave(ticket, ok=ok, retry_after_s=throttled, tokens=tokens)
            self.on_call(outcome, time.monotonic() - started)

    def _used(self, burst: Burst) -> float | None:
        used = burst._usage
        for usage in used:
            self.on_usage(usage)
        if used:
            self.admission.model = used[-1].model
        return float(sum(u.total for u in used)) if used else None

    def _free_when_done(self, thread: Future[Any], ticket: Ticket, burst: Burst) -> None:
        """A sync call past its timeout runs on in its thread (a thread cannot be
        cancelled): its slot stays taken until the thread ends. Freed at the timeout, the
        next call admitted would wait for a thread and reach the model whenever one came
        free, after the rate admitted it: a minute at the model could hold more calls than
        the rate allows. The call that timed out is tried again as usual, once a slot is
        free."""
        loop, since = asyncio.get_running_loop(), time.monotonic()
        log.warning(
            "writer call past its timeout runs on in its thread; its slot stays taken "
            "until it ends (give the model client a timeout of its own)",
            slots_taken=self.admission.in_flight,
        )

        def freed() -> None:
            tokens, ok = None, not thread.cancelled() and thread.exception() is None
            try:
                tokens = self._used(burst)
            finally:
                self.admission.freed(ticket, tokens, ok=ok)
                held = round(time.monotonic() - since, 3)
                log.info("writer call past its timeout ended; its slot is free", held_s=held)

        def done(_: Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed first: nothing waits
                loop.call_soon_threadsafe(freed)

        thread.add_done_callback(done)

    async def _run(self, burst: Burst, thread: list[Future[Any]]) -> Written:
        if self._async:
            call: Awaitable[Any] = self.writer(burst)
        else:
            # the writer's thread runs in this task's context, so what it asks of
            # the loop (``effects.once_sync``) is done for the record being answered
            run = functools.partial(contextvars.copy_context().run, self.writer, burst)
            thread.append(self._executor().submit(run))
            call = asyncio.wrap_future(thread[0])
        try:
            value = await asyncio.wait_for(call, self.policy.timeout_s)
        except TimeoutError:
            raise WriterTimeout(
                f"the reply writer ran past {self.policy.timeout_s:g} s (ONCEONLY_WRITER_TIMEOUT_S)"
            ) from None
        if inspect.isawaitable(value):  # a sync function that returned a coroutine
            value = await asyncio.wait_for(value, self.policy.timeout_s)
        return outcome_of(value)

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
        usage: list[Usage] = []  # every call's, whatever the attempts
        attempt = 0
        throttled = 0  # 429s with Retry-After: the admission waits, no attempt is counted
        backoff = wait_random_exponential(
            multiplier=self.policy.backoff_initial_s, max=self.policy.backoff_max_s
        )

        def was_throttled(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome is not None else None
            return exc is not None and retry_after_s(exc, time.time()) is not None

        def stop(state: RetryCallState) -> bool:
            if was_throttled(state):  # the model asked to wait: the pause waits, up to a cap
                return throttled > THROTTLED_MAX
            return attempt - throttled >= self.policy.attempts

        def wait(state: RetryCallState) -> float:
            return 0.0 if was_throttled(state) else float(backoff(state))

        async def one() -> Written:
            nonlocal attempt, throttled
            attempt += 1
            if attempt > 1:
                log.warning("writer retry", attempt=attempt, **(ids or {}))
            burst = Burst(tuple(messages), effects, attempt, history, loop, cache)
            try:
                written = await self._call_once(burst)
            except Exception as exc:
                if retry_after_s(exc, time.time()) is not None:
                    throttled += 1
                raise
            finally:
                usage.extend(burst._usage)
            return with_usage(written, usage)

        try:
            retry = retry_if_exception(_retryable)
            return await retried(
                lambda: AsyncRetrying(stop=stop, wait=wait, retry=retry, reraise=True), one
            )
        except (asyncio.CancelledError, Rebalancing, BrokerUnavailable):
            raise
        except Exception as exc:
            raise WriterFailed(
                f"the reply writer failed {attempt} time(s); last error: {exc!r}",
                attempts=attempt,
                last_error=repr(exc),
            ) from exc

# it reads and sets asyncio's private attributes, as BaseEventLoop does, typeshed not having them
# mypy: disable-error-code="attr-defined,override,assignment"
"""An asyncio event loop on virtual time (the "looptime" trick), lean enough for thousands
of schedules a minute.

:class:`SimLoop` is an event loop whose :meth:`~SimLoop.time` is a counter. When nothing
is ready, asyncio's loop would wait for I/O until the next timer is due; this loop has no
I/O, so it moves the counter forward by that wait instead. Every ``asyncio.sleep``,
``wait_for``, ``call_at`` and tenacity sleep then takes no real time, in a fixed order.
``run_in_executor`` (and so ``asyncio.to_thread``) runs its function inline.

It runs callbacks in exactly the order ``asyncio.SelectorEventLoop`` runs them (the same
ready queue, the same timer heap and its clean-up of cancelled timers, the same clock
steps), without what a simulation does not use and pays for on every step: the selector
polled each iteration, the debug checks, the handles' Python ``__init__`` and the timer
heap's Python comparisons (its entries are ``(when, handle)`` pairs, which order exactly
as the handles do). A seed's schedule is the same step for step as on asyncio's own loop.

A loop with nothing ready and no timer would block for ever: it raises :class:`Deadlock`
instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from asyncio import events, format_helpers
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from heapq import heapify, heappop, heappush
from typing import Any, TypeVar

T = TypeVar("T")
H = TypeVar("H", bound=asyncio.Handle)

_MAX_WAIT_S = 24 * 3600.0  #: asyncio's MAXIMUM_SELECT_TIMEOUT: the longest single wait
_CLEAN_AT = 100  #: asyncio's _MIN_SCHEDULED_TIMER_HANDLES
_CLEAN_FRACTION = 0.5  #: asyncio's _MIN_CANCELLED_TIMER_HANDLES_FRACTION


class _Timer(events.TimerHandle):
    """asyncio's timer handle, its ``cancel`` in one call (asyncio's takes three)."""

    __slots__ = ()

    def cancel(self) -> None:
        if not self._cancelled:
            if self._scheduled:
                self._loop._timer_cancelled_count += 1
            self._cancelled = True
            self._callback = None
            self._args = None


_new_handle = events.Handle.__new__
_new_timer = _Timer.__new__
_Handle = events.Handle
_TimerHandle = _Timer
_Task = asyncio.Task
_copy_context = contextvars.copy_context


class Deadlock(RuntimeError):
    """Every task waits for something that no timer will bring."""


class SimLoop(asyncio.BaseEventLoop):
    """An event loop without I/O whose clock is virtual, starting at ``start`` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._now = start
        # a timer due at t runs once the clock reaches t; float sums may land just short
        self._clock_resolution = 1e-6
        self._scheduled: list[tuple[float, asyncio.TimerHandle]] = []

    def time(self) -> float:
        return self._now

    def create_task(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        if self._task_factory is not None:
            return super().create_task(coro, name=name, context=context)
        if self._closed:
            raise RuntimeError("Event loop is closed")
        return _Task(coro, loop=self, name=name, context=context)

    def call_soon(
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = self._handle(_new_handle(_Handle), callback, args, context)
        self._ready.append(handle)
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        timer = self._handle(_new_timer(_TimerHandle), callback, args, context)
        timer._when = when
        heappush(self._scheduled, (when, timer))
        timer._scheduled = True
        return timer

    def _handle(
        self,
        handle: H,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> H:
        """What ``Handle.__init__`` sets, on a handle made without it (``__new__``)."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        handle._context = _copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        return handle

    def _run_once(self) -> None:
        """Iterations as ``BaseEventLoop._run_once`` makes them, the wait on the clock, until
        the loop is stopped (``run_forever`` calls this until then: here in one call)."""
        ready = self._ready
        popleft = ready.popleft
        scheduled: list[tuple[float, asyncio.TimerHandle]] = self._scheduled
        resolution = self._clock_resolution
        while True:
            count = len(scheduled)
            if count > _CLEAN_AT and self._timer_cancelled_count / count > _CLEAN_FRACTION:
                scheduled = self._clean(scheduled)
            else:
                while scheduled and scheduled[0][1]._cancelled:
                    self._timer_cancelled_count -= 1
                    heappop(scheduled)[1]._scheduled = False
            if not ready and not self._stopping:
                if not scheduled:
                    raise Deadlock("every task waits and no timer is due")
                wait = scheduled[0][0] - self._now
                if wait > 0:  # asyncio's min(max(0, wait), MAXIMUM_SELECT_TIMEOUT)
                    self._now += wait if wait < _MAX_WAIT_S else _MAX_WAIT_S
            end = self._now + resolution
            while scheduled:
                entry = scheduled[0]
                if entry[0] >= end:
                    break
                heappop(scheduled)
                entry[1]._scheduled = False
                ready.append(entry[1])
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:  # Handle._run, inline
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._raised(handle, exc)
            if self._stopping:
                return

    def _raised(self, handle: asyncio.Handle, exc: BaseException) -> None:
        """A callback raised: reported as ``Handle._run`` reports it."""
        source = format_helpers._format_callback_source(handle._callback, handle._args)
        self.call_exception_handler(
            {"message": f"Exception in callback {source}", "exception": exc, "handle": handle}
        )

    def _clean(
        self, scheduled: list[tuple[float, asyncio.TimerHandle]]
    ) -> list[tuple[float, asyncio.TimerHandle]]:
        """Drop the cancelled timers, as asyncio does when they are over half the heap."""
        kept = []
        for entry in scheduled:
            if entry[1]._cancelled:
                entry[1]._scheduled = False
            else:
                kept.append(entry)
        heapify(kept)
        self._scheduled = kept
        self._timer_cancelled_count = 0
        return kept

    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:
        return None

    def run_in_executor(
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def run(main: Coroutine[Any, Any, T], start: float = 0.0) -> T:
    """Run ``main`` to its end on a fresh :class:`SimLoop`; close the loop after."""
    loop = SimLoop(start)
    try:
        return loop.run_until_complete(main)
    finally:
        _cancel_all(loop)
        loop.close()


def _cancel_all(loop: SimLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        with contextlib.suppress(Deadlock):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

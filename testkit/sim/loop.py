"""An asyncio event loop on virtual time (the "looptime" trick).

:class:`SimLoop` is a selector event loop whose :meth:`~SimLoop.time` is a counter. When
nothing is ready, asyncio asks its selector to wait until the next timer is due; the
virtual selector looks at the real file descriptors without blocking and, finding none
ready, moves the counter forward by that timeout instead. Every ``asyncio.sleep``,
``wait_for``, ``call_at`` and tenacity sleep then takes no real time, in a fixed order.
``run_in_executor`` (and so ``asyncio.to_thread``) runs its function inline.

A loop with nothing ready and no timer would block for ever: the selector raises
:class:`Deadlock` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Every task waits for something that no timer or file descriptor will bring."""


class _Clock:
    __slots__ = ("now",)

    def __init__(self, start: float) -> None:
        self.now = start


class _VirtualSelector(selectors.BaseSelector):
    """A real selector polled without blocking; a wait moves the virtual clock instead."""

    def __init__(self, clock: _Clock) -> None:
        self._inner = selectors.DefaultSelector()
        self._clock = clock

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise Deadlock("every task waits and no timer is due")
        self._clock.now += timeout
        return []

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()


class SimLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock is virtual, starting at ``start`` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._clock = _Clock(start)
        super().__init__(_VirtualSelector(self._clock))
        # a timer due at t runs once the clock reaches t; float sums may land just short
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self._clock.now

    def run_in_executor(  # type: ignore[override]
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

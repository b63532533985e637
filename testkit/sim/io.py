"""The boundary between a simulated worker and the world: every call that leaves a worker
(the mail API, the model, the broker) goes through :func:`remote`.

A request leaves at once and takes effect at the far end after its outbound latency,
whatever happens to its caller then (a worker killed after a send still sent it); the
answer comes back after the return latency. A paused worker's requests leave only once it
resumes, and answers reach it only then; a dead worker's calls never leave.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Killed(BaseException):
    """The calling worker is dead: nothing it asks leaves it."""


class Actor:
    """A worker process as the world sees it: alive or dead, running or paused."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self._awake = asyncio.Event()
        self._awake.set()

    @property
    def paused(self) -> bool:
        return not self._awake.is_set()

    def pause(self) -> None:
        self._awake.clear()

    def resume(self) -> None:
        self._awake.set()

    async def awake(self) -> None:
        """Return once the actor runs (at once unless paused); raise if it died."""
        if not self._awake.is_set():
            await self._awake.wait()
        if self.dead:
            raise Killed(self.name)


#: the actor whose task is running (None: the world's own tasks)
current: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("sim_actor", default=None)


@dataclass(frozen=True, slots=True)
class Later(Generic[T]):
    """A far end's answer that takes ``delay`` more (an email being sent): :func:`remote`
    calls ``then`` after it, as a task would after ``await asyncio.sleep(delay)``."""

    delay: float
    then: Callable[[], T | Later[T]]


async def remote(out_s: float, far: Callable[[], T | Later[T]], back_s: float) -> T:
    """Call ``far`` at the far end ``out_s`` after this call leaves; its answer (or error)
    reaches the caller ``back_s`` after it is ready. ``far`` answers at once or with a
    :class:`Later`.

    Callbacks, not a task: each step is the loop callback a task running the far end
    (sleep ``out_s``, ``far()``, sleep ``back_s``, answer) would be, in the same place in
    the loop's queue (the call leaves, it arrives after ``out_s``, the far end runs on the
    next step, the answer is back ``back_s`` after that and wakes the caller on the next),
    so a schedule is the same either way (tests/unit/testkit/test_sim_loop.py); a
    simulated broker or API call costs a third as much."""
    actor = current.get()
    if actor is not None:
        await actor.awake()
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()
    context = contextvars.Context()  # the world's

    def settle(result: T | None, error: Exception | None) -> None:
        if not answer.done():
            if error is None:
                answer.set_result(result)  # type: ignore[arg-type]
            else:
                answer.set_exception(error)

    def back(result: T | None, error: Exception | None) -> None:
        loop.call_soon(settle, result, error, context=context)  # the task's wake-up

    def run(step: Callable[[], T | Later[T]]) -> None:
        error = None
        try:
            result: T | Later[T] | None = step()
        except Exception as exc:
            result, error = None, exc
        if isinstance(result, Later):
            if result.delay > 0:
                loop.call_at(loop.time() + result.delay, arrive, result.then, context=context)
            else:
                loop.call_soon(run, result.then, context=context)  # sleep(0): one step
        elif back_s > 0:
            loop.call_at(loop.time() + back_s, back, result, error, context=context)
        else:
            settle(result, error)

    def arrive(step: Callable[[], T | Later[T]]) -> None:
        loop.call_soon(run, step, context=context)  # the task's wake-up

    def leave() -> None:
        if out_s > 0:
            loop.call_at(loop.time() + out_s, arrive, far, context=context)
        else:
            run(far)

    loop.call_soon(leave, context=context)  # the task's first step
    result = await answer
    if actor is not None:
        await actor.awake()
    return result

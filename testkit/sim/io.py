"""The boundary between a simulated worker and the world: every call that leaves a worker
(the mail API, the model, the broker) goes through :func:`remote`.

A request leaves at once and takes effect at the far end after its outbound latency,
whatever happens to its caller then (a worker killed after a send still sent it); the
answer comes back after the return latency. A paused worker's requests leave only once it
resumes, and answers reach it only then; a dead worker's calls never leave. A worker cut
off from a far end (:data:`KAFKA`: the broker; the worker runs on) reaches it only once
the cut heals: a request made meanwhile arrives then (TCP sends it again; no request of
the worker's times out within a cut), and an answer that comes meanwhile reaches it then.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: the far ends a worker can be cut off from (:meth:`Actor.cut_for`): the broker, the mail API
KAFKA = "the broker"
MAIL = "the mail API"


class Killed(BaseException):
    """The calling worker is dead: nothing it asks leaves it."""


class Actor:
    """A worker process as the world sees it: alive or dead, running or paused."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self._awake = asyncio.Event()
        self._awake.set()
        #: far end -> the virtual time the actor's cut from it heals
        self.cut: dict[str, float] = {}

    @property
    def paused(self) -> bool:
        return not self._awake.is_set()

    def pause(self) -> None:
        self._awake.clear()

    def resume(self) -> None:
        self._awake.set()

    def cut_for(self, far: str) -> float:
        """How long until the actor reaches ``far`` again (0: it does)."""
        heals = self.cut.get(far)
        return 0.0 if heals is None else max(0.0, heals - asyncio.get_running_loop().time())

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


async def remote(
    out_s: float, far: Callable[[], T | Later[T]], back_s: float, to: str | None = None
) -> T:
    """Call ``far`` at the far end ``out_s`` after this call leaves; its answer (or error)
    reaches the caller ``back_s`` after it is ready. ``far`` answers at once or with a
    :class:`Later`. ``to``: the far end a cut can part the caller from (:data:`KAFKA`).

    Callbacks, not a task: each step is the loop callback a task running the far end
    (sleep ``out_s``, ``far()``, sleep ``back_s``, answer) would be, in the same place in
    the loop's queue (the call leaves, it arrives after ``out_s``, the far end runs on the
    next step, the answer is back ``back_s`` after that and wakes the caller on the next),
    so a schedule is the same either way (tests/unit/testkit/test_sim_loop.py); a
    simulated broker or API call costs a third as much."""
    actor = current.get()
    if actor is not None:
        await actor.awake()
        if to is not None:
            out_s += actor.cut_for(to)  # held at the network until the cut heals
    loop = asyncio.get_running_loop()
    call: _Call[T] = _Call(loop, far, out_s, back_s)
    loop.call_soon(call.leave, context=call.context)  # the task's first step
    try:
        result = await call.answer
    except asyncio.CancelledError:  # the caller gave up (a client's timeout): the far end
        call.answer.add_done_callback(_retrieved)  # runs still, its answer unread
        raise
    except Exception:
        await _heal(actor, to)
        raise
    await _heal(actor, to)
    if actor is not None:
        await actor.awake()
    return result


def _retrieved(answer: asyncio.Future[object]) -> None:
    if not answer.cancelled():
        answer.exception()


async def reach(to: str) -> None:
    """Return once the current actor reaches ``to`` (a request it makes there leaves)."""
    await _heal(current.get(), to)


async def _heal(actor: Actor | None, to: str | None) -> None:
    """An answer (or error) that came while ``actor`` was cut off from ``to`` reaches it
    once the cut heals."""
    if actor is not None and to is not None and (held := actor.cut_for(to)) > 0:
        await asyncio.sleep(held)


class _Call(Generic[T]):
    """One :func:`remote` call's steps, as loop callbacks: an object and its bound methods,
    not closures over each other, so that nothing of a call is left for the garbage
    collector once it is answered (closures that name each other are a cycle, and each
    schedule left ~10,000 such objects to the collector's pass after it)."""

    __slots__ = ("answer", "back_s", "context", "far", "loop", "out_s")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        far: Callable[[], T | Later[T]],
        out_s: float,
        back_s: float,
    ) -> None:
        self.loop = loop
        self.far = far
        self.out_s = out_s
        self.back_s = back_s
        self.answer: asyncio.Future[T] = loop.create_future()
        self.context = contextvars.Context()  # the world's

    def leave(self) -> None:
        if self.out_s > 0:
            self.loop.call_at(
                self.loop.time() + self.out_s, self.arrive, self.far, context=self.context
            )
        else:
            self.run(self.far)

    def arrive(self, step: Callable[[], T | Later[T]]) -> None:
        self.loop.call_soon(self.run, step, context=self.context)  # the task's wake-up

    def run(self, step: Callable[[], T | Later[T]]) -> None:
        loop = self.loop
        error = None
        try:
            result: T | Later[T] | None = step()
        except Exception as exc:
            result, error = None, exc
        try:
            if isinstance(result, Later):
                if result.delay > 0:
                    loop.call_at(
                        loop.time() + result.delay, self.arrive, result.then, context=self.context
                    )
                else:
                    loop.call_soon(self.run, result.then, context=self.context)  # sleep(0)
            elif self.back_s > 0:
                loop.call_at(
                    loop.time() + self.back_s, self.back, result, error, context=self.context
                )
            else:
                self.settle(result, error)
        finally:
            error = None  # this frame, held by the error's traceback, would be a cycle

    def back(self, result: T | None, error: Exception | None) -> None:
        self.loop.call_soon(self.settle, result, error, context=self.context)  # the wake-up

    def settle(self, result: T | None, error: Exception | None) -> None:
        answer = self.answer
        if not answer.done():
            if error is None:
                answer.set_result(result)  # type: ignore[arg-type]
            else:
                answer.set_exception(error)

"""The simulator's lean loop and callback far ends play a schedule exactly as asyncio's own
selector loop and one task per far end do (testkit/sim/loop.py, io.py): the same trace,
step for step, so a seed explores what it explored before they were made lean."""

from __future__ import annotations

import asyncio
import contextvars
import random
import selectors
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pytest

from testkit.sim import io, log, mail, member
from testkit.sim.loop import Deadlock, _cancel_all
from testkit.sim.run import Result, _play, run_schedule
from testkit.sim.schedule import Bugs, Schedule

T = TypeVar("T")


pytestmark = pytest.mark.usefixtures("sim_quiet")


class _WaitMovesClock(selectors.BaseSelector):
    """A real selector polled without blocking; a wait moves the loop's clock instead."""

    def __init__(self, loop: _SelectorLoop) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise Deadlock("every task waits and no timer is due")
        self._loop.now += timeout
        return []

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()


class _SelectorLoop(asyncio.SelectorEventLoop):
    """asyncio's own selector loop on a virtual clock (the simulator's first loop)."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_WaitMovesClock(self))
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self.now

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> Any:
        future: asyncio.Future[T] = self.create_future()
        future.set_result(func(*args))
        return future


_far: set[asyncio.Task[None]] = set()


async def _by_task(
    out_s: float, far: Callable[[], T | io.Later[T]], back_s: float, to: str | None = None
) -> T:
    """``io.remote`` as first built: a task runs the far end, sleeping for the latencies
    and for each :class:`~testkit.sim.io.Later` (and, since cuts, for a cut's heal)."""
    actor = io.current.get()
    if actor is not None:
        await actor.awake()
        if to is not None:
            out_s += actor.cut_for(to)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()

    async def far_end() -> None:
        if out_s > 0:
            await asyncio.sleep(out_s)
        try:
            result = far()
            while isinstance(result, io.Later):
                await asyncio.sleep(result.delay)
                result = result.then()
        except Exception as exc:
            if back_s > 0:
                await asyncio.sleep(back_s)
            if not answer.done():
                answer.set_exception(exc)
            return
        if back_s > 0:
            await asyncio.sleep(back_s)
        if not answer.done():
            answer.set_result(result)

    task = loop.create_task(far_end(), context=contextvars.Context())
    _far.add(task)
    task.add_done_callback(_far.discard)
    try:
        result = await answer
    except asyncio.CancelledError:  # the caller gave up: the far end runs on
        raise
    except Exception:
        if to is not None:
            await io.reach(to)
        raise
    if to is not None:
        await io.reach(to)
    if actor is not None:
        await actor.awake()
    return result


def _as_first_built(schedule: Schedule, monkeypatch: pytest.MonkeyPatch) -> Result:
    """The schedule on asyncio's selector loop, each far end run by a task."""
    with monkeypatch.context() as patched:
        for module in (log, mail, member):
            patched.setattr(module, "remote", _by_task)
        loop = _SelectorLoop()
        random.seed(schedule.seed)
        try:
            return loop.run_until_complete(_play(schedule))
        finally:
            _cancel_all(loop)  # type: ignore[arg-type]
            loop.close()


@pytest.mark.parametrize(
    ("seed", "bugs"),
    [(7, Bugs()), (85, Bugs()), (204, Bugs()), (3, Bugs(no_fence_before_send=True))],
)
def test_a_schedule_runs_as_on_asyncio_s_own_loop_with_a_task_per_far_end(
    seed: int, bugs: Bugs, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _as_first_built(Schedule(seed, bugs), monkeypatch)
    lean = run_schedule(Schedule(seed, bugs))

    assert len(lean.events) > 200
    assert lean.events == first.events
    assert (lean.verdict, lean.virtual_s, lean.settled) == (
        first.verdict,
        first.virtual_s,
        first.settled,
    )


def test_a_far_end_answers_after_both_latencies_and_its_error_reaches_the_caller() -> None:
    async def main() -> tuple[float, int, float, str]:
        loop = asyncio.get_running_loop()
        ran_at: list[float] = []

        def far() -> int:
            ran_at.append(loop.time())
            return 42

        def fails() -> int:
            raise ValueError("refused")

        answer = await io.remote(0.5, far, 0.25)
        answered_at = loop.time()
        with pytest.raises(ValueError) as raised:
            await io.remote(1.0, fails, 1.0)
        return ran_at[0], answer, answered_at, f"{raised.value} at {loop.time()}"

    from testkit.sim.loop import run

    assert run(main()) == (0.5, 42, 0.75, "refused at 2.75")

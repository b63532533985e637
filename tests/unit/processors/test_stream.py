"""The worker's stream: batches that wait for a first record instead of polling for one
(onceonly.processors.runtime.stream), run by faust's own agent test harness."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import faust

from onceonly.processors.runtime.stream import BatchingStream

WITHIN_S = 0.05
_apps = itertools.count()


@dataclass
class Taken:
    batches: list[list[int]] = field(default_factory=list)
    at: list[float] = field(default_factory=list)  #: monotonic time each batch came
    waits: int = 0  #: the batch loop's waits on its stream


def _agent(taken: Taken, stream_class: type = BatchingStream) -> Any:
    app = faust.App(f"stream-test-{next(_apps)}", autodiscover=False, Stream=stream_class)

    async def batches(stream: Any) -> None:
        taking = stream.noack()
        wait: Callable[..., Any] = taking.wait_for_stopped

        async def counted(*args: Any, **kwargs: Any) -> Any:
            taken.waits += 1
            return await wait(*args, **kwargs)

        taking.wait_for_stopped = counted
        async for batch in taking.take_events(3, within=WITHIN_S):
            taken.batches.append([event.value for event in batch])
            taken.at.append(time.monotonic())

    return app.agent()(batches)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


async def test_a_full_batch_is_taken_at_once_and_the_rest_after_the_wait() -> None:
    taken = Taken()
    async with _agent(taken).test_context() as agent:
        for value in range(7):
            await agent.put(value, wait=False)
        await asyncio.wait_for(_until(lambda: len(taken.batches) == 3), 5)

    assert taken.batches == [[0, 1, 2], [3, 4, 5], [6]]


async def test_a_batch_waits_from_its_first_record() -> None:
    taken = Taken()
    async with _agent(taken).test_context() as agent:
        await asyncio.sleep(0.12)  # idle: faust's own loop would tick at some moment of this
        put = time.monotonic()
        await agent.put(99, wait=False)
        await asyncio.wait_for(_until(lambda: bool(taken.batches)), 5)

    assert taken.batches == [[99]]
    assert taken.at[0] - put >= WITHIN_S * 0.9


async def test_an_idle_stream_does_not_wake() -> None:
    # faust's take_events waits WITHIN_S at a time, records or not (6 waits in 0.3 s)
    taken = Taken()
    async with _agent(taken).test_context() as agent:
        await agent.put(1, wait=False)
        await asyncio.wait_for(_until(lambda: bool(taken.batches)), 5)
        before = taken.waits
        await asyncio.sleep(0.3)
        idle = taken.waits - before

    assert idle <= 1

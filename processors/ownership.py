"""Ownership checks coalesced: one commit round trip answers every check waiting for it.

The fence (:mod:`processors.fence`) asks the group coordinator before each ledger write
and each send whether this worker still owns the record's partition; each ask is a commit,
and the consumer's commits run one at a time (aiokafka's commit lock). At saturation the
asks queue behind that lock in arrival order: every reply waits for every reply before it,
whatever its tenant (measured: ``bench.flow`` (C) at concurrency 64, a tenant's text was
recorded 3.9 s after its message and sent 10 s after).

:class:`Coalesced` keeps the fence's guarantee (the answer comes from a commit sent after
the check was asked) with one commit in flight per partition and generation: a check
asked while a commit is in flight waits for the next one, which starts when that one ends
and answers every check that came meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

Confirm = Callable[[Any, int], Awaitable[bool]]


@dataclass
class _Rounds:
    running: asyncio.Future[bool] | None = None
    #: the next round's answer, for the checks asked while one was running
    queued: asyncio.Future[bool] | None = None


class Coalesced:
    """``confirm(tp, generation)`` with the checks of one partition sharing round trips."""

    def __init__(self, confirm: Confirm) -> None:
        self._confirm = confirm
        self._rounds: dict[Hashable, _Rounds] = {}
        self.round_trips = 0

    async def __call__(self, tp: Any, generation: int) -> bool:
        key = (tp, generation)
        rounds = self._rounds.setdefault(key, _Rounds())
        if rounds.running is None:
            rounds.running = self._start(key, rounds)
            return await asyncio.shield(rounds.running)
        if rounds.queued is None:
            rounds.queued = asyncio.get_running_loop().create_future()
        return await asyncio.shield(rounds.queued)

    def _start(self, key: tuple[Any, int], rounds: _Rounds) -> asyncio.Future[bool]:
        self.round_trips += 1
        task = asyncio.ensure_future(self._confirm(*key))
        task.add_done_callback(lambda done: self._ended(key, rounds))
        return task

    def _ended(self, key: tuple[Any, int], rounds: _Rounds) -> None:
        queued, rounds.queued = rounds.queued, None
        if queued is None:
            rounds.running = None
            self._rounds.pop(key, None)
            return
        rounds.running = self._start(key, rounds)
        rounds.running.add_done_callback(lambda done: _settle(queued, done))


def _settle(future: asyncio.Future[bool], done: asyncio.Future[bool]) -> None:
    if future.done():
        return
    if done.cancelled():
        future.cancel()
    elif done.exception() is not None:
        future.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        future.set_result(done.result())

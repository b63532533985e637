"""The fence's shared check rounds: a check is answered by a round that began after it asked."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from onceonly.processors.exceptions import Fenced
from onceonly.processors.fence import Fence, Rounds


class Coordinator:
    """An ``ask`` that answers with its round's number when released, one release a round."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.running = 0
        self.most_running = 0
        self.release = asyncio.Queue[BaseException | None]()

    async def __call__(self, argument: str) -> int:
        self.asked.append(argument)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            outcome = await self.release.get()
        finally:
            self.running -= 1
        if outcome is not None:
            raise outcome
        return len(self.asked)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_checks_asked_during_a_round_share_the_next_round() -> None:
    coordinator = Coordinator()
    rounds = Rounds(coordinator)
    first = asyncio.ensure_future(rounds("p0"))
    await _settle()
    later = [asyncio.ensure_future(rounds(f"p{i}")) for i in range(1, 51)]
    await _settle()

    coordinator.release.put_nowait(None)
    coordinator.release.put_nowait(None)
    answers = [await first, *[await waiter for waiter in later]]

    assert coordinator.asked == ["p0", "p1"]  # 51 checks, two commits
    assert answers == [1] + [2] * 50
    assert rounds.rounds == 2


async def test_a_check_is_never_answered_by_a_round_that_began_before_it_asked() -> None:
    coordinator = Coordinator()
    rounds = Rounds(coordinator)
    first = asyncio.ensure_future(rounds("p0"))
    await _settle()
    late = asyncio.ensure_future(rounds("p1"))
    await _settle()

    coordinator.release.put_nowait(None)
    assert await first == 1
    await _settle()
    assert not late.done()  # the round it would have shared began before it asked

    coordinator.release.put_nowait(None)
    assert await late == 2


async def test_one_commit_is_in_flight_at_a_time() -> None:
    coordinator = Coordinator()
    rounds = Rounds(coordinator)
    waiters = []
    for i in range(6):
        waiters.append(asyncio.ensure_future(rounds(f"p{i}")))
        await _settle()
    for _ in waiters:
        coordinator.release.put_nowait(None)
    await asyncio.gather(*waiters)

    assert coordinator.most_running == 1


async def test_a_failed_round_fails_its_waiters_and_the_next_round_still_runs() -> None:
    coordinator = Coordinator()
    rounds = Rounds(coordinator)
    failing = [asyncio.ensure_future(rounds("p0"))]
    await _settle()
    following = asyncio.ensure_future(rounds("p1"))
    await _settle()

    coordinator.release.put_nowait(RuntimeError("coordinator gone"))
    coordinator.release.put_nowait(None)

    with pytest.raises(RuntimeError, match="coordinator gone"):
        await failing[0]
    assert await following == 2


async def test_a_waiter_cancelled_mid_round_does_not_stop_the_round_for_the_others() -> None:
    coordinator = Coordinator()
    rounds = Rounds(coordinator)
    first = asyncio.ensure_future(rounds("p0"))
    await _settle()
    leaving, staying = (asyncio.ensure_future(rounds(p)) for p in ("p1", "p2"))
    await _settle()
    leaving.cancel()

    coordinator.release.put_nowait(None)
    coordinator.release.put_nowait(None)

    assert (await first, await staying) == (1, 2)
    assert leaving.cancelled()


async def test_a_lost_partition_is_fenced_and_logged_by_its_topic_and_number() -> None:
    tp = SimpleNamespace(topic="onceonly.deliveries", partition=3)
    fenced: list[int] = []

    async def lost(partition: Any, generation: int) -> bool:
        return False

    fence = Fence(lost, lambda: (tp, 7), on_fenced=lambda: fenced.append(1))
    with capture_logs() as logs, pytest.raises(Fenced):
        await fence.check("send")

    [line] = [e for e in logs if e["event"] == "partition no longer ours; standing down"]
    assert (line["topic"], line["partition"], line["generation"]) == ("onceonly.deliveries", 3, 7)
    assert fenced == [1]

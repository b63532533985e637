"""Coalesced ownership checks: fewer round trips, and every answer from a later commit."""

from __future__ import annotations

import asyncio

import pytest

from processors.ownership import Coalesced


class Coordinator:
    """A group coordinator that takes 10 ms a commit; ``owned`` says what it answers."""

    def __init__(self) -> None:
        self.owned = True
        self.rounds: list[tuple[int, int]] = []  # (started, ended) as ticks
        self.ticks = 0
        self.fail: Exception | None = None

    async def confirm(self, tp: object, generation: int) -> bool:
        start = self.tick()
        await asyncio.sleep(0.01)
        self.rounds.append((start, self.tick()))
        if self.fail is not None:
            raise self.fail
        return self.owned

    def tick(self) -> int:
        self.ticks += 1
        return self.ticks


async def test_fifty_checks_at_once_cost_two_round_trips_each_answered_by_a_later_commit() -> None:
    coordinator = Coordinator()
    confirm = Coalesced(coordinator.confirm)

    async def check() -> tuple[int, bool, int]:
        asked = coordinator.tick()
        answer = await confirm("tp-0", 3)
        return asked, answer, coordinator.tick()

    first = asyncio.ensure_future(check())
    await asyncio.sleep(0.001)  # a commit is in flight when the others ask
    others = asyncio.gather(*(check() for _ in range(49)))
    results = [await first, *await others]

    assert all(answer for _, answer, _ in results)
    assert confirm.round_trips == 2
    for asked, _, answered in results:  # a round that started after the ask, and ended
        assert any(asked < start and end < answered for start, end in coordinator.rounds)


async def test_partitions_and_generations_do_not_share_round_trips() -> None:
    coordinator = Coordinator()
    confirm = Coalesced(coordinator.confirm)
    await asyncio.gather(confirm("tp-0", 1), confirm("tp-1", 1), confirm("tp-0", 2))
    assert confirm.round_trips == 3


async def test_a_refusal_and_an_error_reach_every_check_of_their_round() -> None:
    coordinator = Coordinator()
    confirm = Coalesced(coordinator.confirm)
    coordinator.owned = False
    first = asyncio.ensure_future(confirm("tp", 1))
    await asyncio.sleep(0.001)
    assert await asyncio.gather(first, confirm("tp", 1), confirm("tp", 1)) == [False] * 3

    coordinator.fail = RuntimeError("coordinator gone")
    first = asyncio.ensure_future(confirm("tp", 1))
    await asyncio.sleep(0.001)
    later = asyncio.ensure_future(confirm("tp", 1))
    with pytest.raises(RuntimeError):
        await first
    with pytest.raises(RuntimeError):
        await later


async def test_a_cancelled_check_leaves_the_others_their_answer() -> None:
    coordinator = Coordinator()
    confirm = Coalesced(coordinator.confirm)
    first = asyncio.ensure_future(confirm("tp", 1))
    await asyncio.sleep(0.001)
    gone, kept = asyncio.ensure_future(confirm("tp", 1)), asyncio.ensure_future(confirm("tp", 1))
    await asyncio.sleep(0)
    gone.cancel()
    assert await first and await kept
    assert confirm.round_trips == 2

"""A simulated worker cut off from the broker: its requests there wait for the heal, its
other calls go on, and past its session the group gives its partition away."""

from __future__ import annotations

import asyncio

import pytest

from testkit.sim.io import KAFKA, Actor, current, remote
from testkit.sim.log import DRAIN_GRACE_S, SESSION_S
from testkit.sim.loop import run
from testkit.sim.schedule import Schedule
from testkit.sim.world import World

pytestmark = pytest.mark.usefixtures("sim_quiet")


def _call(to: str | None, cut_at: float, cut_s: float) -> tuple[float, float]:
    """A call made at 0 with 1 s each way by an actor cut off from KAFKA from ``cut_at`` for
    ``cut_s``: when its far end ran and when its answer came."""

    async def play() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        actor = Actor("a1")
        current.set(actor)
        ran: list[float] = []

        def cut() -> None:
            actor.cut[KAFKA] = loop.time() + cut_s

        if cut_at:
            loop.call_at(cut_at, cut)
        else:
            cut()
        await remote(1.0, lambda: ran.append(loop.time()), 1.0, to)
        return ran[0], loop.time()

    return run(play())


def test_a_request_made_during_a_cut_reaches_the_broker_at_the_heal() -> None:
    assert _call(KAFKA, cut_at=0.0, cut_s=30.0) == (31.0, 32.0)


def test_an_answer_that_comes_during_a_cut_reaches_the_caller_at_the_heal() -> None:
    assert _call(KAFKA, cut_at=0.5, cut_s=30.0) == (1.0, 30.5)


def test_a_cut_from_the_broker_leaves_the_other_calls_alone() -> None:
    assert _call(None, cut_at=0.0, cut_s=30.0) == (1.0, 2.0)


def _cut_owner(seconds: float) -> tuple[str, str, list[str]]:
    """The group formed, its owner cut off from the broker for ``seconds``: the owners at
    the cut's end and after the heal, and what the cut member's trace says meanwhile."""

    async def play() -> tuple[str, str, list[str]]:
        world = World(Schedule(0))
        for slot in ("a", "b"):
            world.start(slot)
        world.rebalance("the group formed")
        await asyncio.sleep(DRAIN_GRACE_S + 1.0)
        owner = world.part.owner
        assert owner is not None
        world.cut(owner, seconds)
        await asyncio.sleep(seconds - 0.1)
        during = world.part.owner
        await asyncio.sleep(DRAIN_GRACE_S + 1.0)
        after = world.part.owner
        said = [str(what) for _, who, what in world.events if who == owner.name]
        return (
            "self" if during is owner else "other",
            "self" if after is owner else "other",
            said[1:],
        )

    return run(play())


def test_a_member_cut_off_past_its_session_loses_its_partition_and_learns_it_at_the_heal() -> None:
    during, after, said = _cut_owner(SESSION_S + 20.0)

    assert (during, after) == ("other", "other")
    assert said[-2:] == ["reconnected to the broker", "revoked (generation 1)"]


def test_a_member_cut_off_within_its_session_keeps_its_partition() -> None:
    during, after, said = _cut_owner(SESSION_S - 2.0)

    assert (during, after) == ("self", "self")
    assert said[-1] == "reconnected to the broker"

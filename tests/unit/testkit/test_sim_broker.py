"""The simulated broker's failovers and expiring writes (testkit.sim.broker), and a worker
meeting them as the product does."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from testkit.sim.broker import EXPIRY_S, Broker
from testkit.sim.io import remote
from testkit.sim.loop import run
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Fault, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet")


def _broker(seed: int = 1) -> tuple[Broker, list[str]]:
    traced: list[str] = []
    world = SimpleNamespace(
        loop=asyncio.get_running_loop(), trace=lambda who, what: traced.append(str(what))
    )
    return Broker(world, random.Random(seed)), traced  # type: ignore[arg-type]


def test_a_write_during_a_failover_lands_once_a_leader_is_up() -> None:
    async def play() -> tuple[list[float], float]:
        broker, _ = _broker(seed=0)  # a generator whose first draw lands it once
        landed: list[float] = []
        loop = asyncio.get_running_loop()

        def land() -> int:
            landed.append(loop.time())
            return len(landed) - 1

        broker.play(Fault(0.0, "failover", 12.0))
        await asyncio.sleep(2.0)
        await remote(0.01, broker.produce(land), 0.01)
        return landed, loop.time()

    landed, answered = run(play())

    assert landed == [12.0] and answered == pytest.approx(12.01)


def test_a_write_during_a_failover_may_land_twice() -> None:
    """Without idempotence, the copy the old leader took (its ack lost) and the retry's."""

    async def play(seed: int) -> list[float]:
        broker, _ = _broker(seed)
        landed: list[float] = []

        def land() -> int:
            landed.append(asyncio.get_running_loop().time())
            return len(landed) - 1

        broker.play(Fault(0.0, "failover", 5.0))
        await remote(0.0, broker.produce(land), 0.0)
        return landed

    found = {len(run(play(seed))) for seed in range(20)}

    assert found == {1, 2}  # once, or twice, as drawn


def test_a_read_waits_for_the_new_leader() -> None:
    async def play() -> float:
        broker, _ = _broker()
        broker.play(Fault(0.0, "failover", 7.0))
        await remote(0.0, broker.when_up(lambda: None), 0.0)
        return asyncio.get_running_loop().time()

    assert run(play()) == 7.0


def test_an_expiring_write_fails_late_landed_or_not() -> None:
    async def play(seed: int) -> tuple[int, Any, float]:
        broker, _ = _broker(seed)
        landed: list[int] = []
        broker.play(Fault(0.0, "produce_expiry", 30.0))
        try:
            await remote(0.0, broker.produce(lambda: landed.append(1) or 0), 0.0)
        except KafkaTimeoutError as exc:
            return len(landed), exc, asyncio.get_running_loop().time()
        return len(landed), None, asyncio.get_running_loop().time()

    outcomes = [run(play(seed)) for seed in range(20)]

    assert all(isinstance(error, KafkaTimeoutError) for _, error, _ in outcomes)
    assert all(EXPIRY_S[0] <= at <= EXPIRY_S[1] for _, _, at in outcomes)
    assert {landed for landed, _, _ in outcomes} == {0, 1}  # the writer cannot tell


def test_a_write_after_the_expiries_lands_at_once() -> None:
    async def play() -> int:
        broker, _ = _broker()
        broker.play(Fault(0.0, "produce_expiry", 10.0))
        await asyncio.sleep(10.0)
        return await remote(0.0, broker.produce(lambda: 41), 0.0)

    assert run(play()) == 41


def test_a_worker_whose_ledger_write_expires_exits_and_its_restart_answers_once() -> None:
    """Seed 3002 (approval on) expires writes of b1's and b2's: each exits as the product's
    worker exits (``BrokerUnavailable`` out of a lane job), no burst is dead-lettered
    ``record_failed``, and the schedule's messages are answered once."""
    result = run_schedule(Schedule(3002, require_approval=True))

    exits = [e for e in result.events if " exits: BrokerUnavailable" in e]
    assert len(exits) == 2
    assert not [e for e in result.events if "record_failed" in e]
    assert result.passed, result.report()

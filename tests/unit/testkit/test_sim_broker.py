"""The simulated broker's failovers and expiring writes (testkit.sim.broker), and a worker
meeting them as the product does."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import RequestTimedOutError

from testkit.sim import letters
from testkit.sim.broker import EXPIRY_S, Broker
from testkit.sim.io import remote
from testkit.sim.loop import run
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Fault, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet", "before_read_cuts")  # as their seeds were found


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


@pytest.mark.usefixtures("expiries")
def test_an_expiring_write_fails_late_landed_or_not() -> None:
    async def play(seed: int) -> tuple[int, Any, float]:
        broker, _ = _broker(seed)
        landed: list[int] = []
        broker.play(Fault(0.0, "produce_expiry", 30.0))
        try:
            await remote(0.0, broker.produce(lambda: landed.append(1) or 0), 0.0)
        except RequestTimedOutError as exc:
            return len(landed), exc, asyncio.get_running_loop().time()
        return len(landed), None, asyncio.get_running_loop().time()

    outcomes = [run(play(seed)) for seed in range(20)]

    assert all(isinstance(error, RequestTimedOutError) for _, error, _ in outcomes)
    assert all(EXPIRY_S[0] <= at <= EXPIRY_S[1] for _, _, at in outcomes)
    assert {landed for landed, _, _ in outcomes} == {0, 1}  # the writer cannot tell


@pytest.mark.usefixtures("expiries")
def test_a_write_after_the_expiries_lands_at_once() -> None:
    async def play() -> int:
        broker, _ = _broker()
        broker.play(Fault(0.0, "produce_expiry", 10.0))
        await asyncio.sleep(10.0)
        return await remote(0.0, broker.produce(lambda: 41), 0.0)

    assert run(play()) == 41


@pytest.fixture
def expiries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drawn ``produce_expiry`` faults played (the default since F38 and F39 were
    fixed; a test that needs them says so)."""
    monkeypatch.setattr(Broker, "expiries", True)


@pytest.mark.parametrize("played", [True, False], ids=["default", "no-expiries"])
def test_expiries_are_drawn_and_played_unless_turned_off(
    monkeypatch: pytest.MonkeyPatch, played: bool
) -> None:
    if not played:
        monkeypatch.setattr(Broker, "expiries", False)
    schedule = Schedule(3002, require_approval=True)
    assert any(f.kind == "produce_expiry" for f in schedule.faults)

    result = run_schedule(schedule)

    assert bool([e for e in result.events if "writes expire" in e]) is played


@pytest.mark.usefixtures("expiries", "before_cuts")
def test_a_worker_whose_ledger_write_expires_exits_and_its_restart_answers_once() -> None:
    """Seed 3002 (approval on) expires writes of b1's and b2's: each exits as the product's
    worker exits (``BrokerUnavailable`` out of a lane job), no burst is dead-lettered
    ``record_failed``, and the schedule's messages are answered once."""
    result = run_schedule(Schedule(3002, require_approval=True))

    exits = [e for e in result.events if " exits: BrokerUnavailable" in e]
    assert len(exits) == 2
    assert not [e for e in result.events if "record_failed" in e]
    assert result.passed, result.report()


@pytest.mark.usefixtures("expiries")
def test_an_events_table_write_while_writes_expire_may_be_lost_unseen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """faust awaits no table write: one the broker failed is gone from the changelog."""
    monkeypatch.setattr(Broker, "lose_table_writes", True)

    async def play(seed: int) -> int:
        broker, _ = _broker(seed)
        put: list[int] = []
        broker.play(Fault(0.0, "produce_expiry", 30.0))
        await remote(0.0, broker.table_write(lambda: put.append(1)), 0.0)
        return len(put)

    assert {run(play(seed)) for seed in range(20)} == {0, 1}


@pytest.mark.usefixtures("expiries")
@pytest.mark.parametrize(
    ("seed", "approval"),
    [
        # F36: ledger writes expired (the broker away) and the worker dead-lettered the
        # burst record_failed: m58's pending record had landed, the next owner sent it, its
        # sent record expired too, and the ledger's last word stayed pending beside the
        # email; (approval on) a draft marked superseded, its mark landed with the ack
        # lost, by a reply never recorded: its messages covered by nothing (the broker
        # away is now the worker's failure: it exits and reads the records again)
        (700002907, None),
        (700010033, True),
        # a worker exited between applying a decision and saying so: the checker now
        # learns a decision applied from the ledger record that carries it
        (730009617, True),
        # F38: a recovered pending record, landed late by a writer past its fence check
        # after the last owner's newer text, was sent before the take-over read that would
        # have written that text again (the send now waits for its partition's take-over)
        (730002178, None),
        # F39: a decision read again after a restart met a late draft after the key's sent
        # record in the store; its refusal wrote the draft again, made anew (no take-over
        # could tell it late), and a newer reply marked it superseded: covered beside its
        # email (a decision now waits for its partition's take-over too)
        (761006726, True),
    ],
)
def test_a_seed_that_found_a_bug_with_expiries_passes(seed: int, approval: bool | None) -> None:
    result = run_schedule(Schedule(seed, require_approval=approval))

    assert result.passed, result.report()


@pytest.mark.usefixtures("as_found")
def test_f37_a_claim_left_by_a_committed_record_is_processed_by_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F37 (fixed): m20's writer failed (letter 0 names m20 and the messages its reply
    covers); its event's *failed* outcome, an events-table write, was lost while writes
    expired, so the changelog kept the claim *in progress*, owned by a record already
    committed. The operator's retry of letter 0 met that claim and was dead-lettered again
    (``retry_raced``), alone, and m2, m5, m7, covered by m20's reply, were left in no open
    letter and unanswered. A claim owned by a record committed before the worker was given
    the partition is stale now (``dedupe.stale``): the retry processes the event."""
    monkeypatch.setattr(Broker, "expiries", True)
    monkeypatch.setattr(Broker, "lose_table_writes", True)

    result = run_schedule(Schedule(700010781, require_approval=True))

    assert result.passed, result.report()
    assert not any("retry_raced ['<m20@sim>']" in e for e in result.events)


#: its members' dead letters fail three times while writes expire
F41 = 80


@pytest.mark.usefixtures("before_cuts")
def test_f41_a_dead_letter_the_broker_did_not_take_ends_the_worker() -> None:
    result = run_schedule(Schedule(F41))

    assert result.passed, result.report()
    assert sum("a dead letter expires" in e for e in result.events) == 3
    assert any("exits: BrokerUnavailable" in e and "dead-letter topic" in e for e in result.events)


def test_f41_a_dead_letter_failure_escaping_as_kafkas_error_is_a_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(letters, "Produced", lambda topic, name: topic)  # before the fix

    result = run_schedule(Schedule(F41))

    assert any("RequestTimedOutError" in e for e in result.errors)

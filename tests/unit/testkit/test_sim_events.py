"""The simulated events table (dedupe) and the webhooks a provider delivers again."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest

from testkit.sim.broker import Broker
from testkit.sim.events import Changelog, EventsStore, claim_original
from testkit.sim.io import Actor
from testkit.sim.loop import run
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet", "before_read_cuts")  # as their seeds were found


def _store() -> tuple[Changelog, Actor, EventsStore]:
    log = Changelog(1)
    member = Actor("a1")
    world = SimpleNamespace(event_log=log, loop=asyncio.get_running_loop(), trace=_untraced)
    world.broker = Broker(world, random.Random(1))  # type: ignore[arg-type]
    return log, member, EventsStore(world, member)  # type: ignore[arg-type]


def _untraced(who: str, what: object) -> None:
    pass


async def _drained(store: EventsStore) -> None:
    while store._sender is not None:
        await asyncio.sleep(0.001)


def test_a_write_is_read_back_at_once_and_lands_on_the_changelog_after_a_latency() -> None:
    async def play() -> tuple[Any, Any, Any]:
        log, _, store = _store()
        store[b"k"] = b"v"
        before = dict(log.state)
        await _drained(store)
        return store.get(b"k"), before, log.state

    read, before, after = run(play())

    assert (read, before, after) == (b"v", {}, {b"k": b"v"})


def test_writes_land_in_the_order_written() -> None:
    async def play() -> list[bytes | None]:
        log, _, store = _store()
        for n in range(20):
            store[b"k"] = b"v%d" % n
        await _drained(store)
        return [value for _, value in log.records]

    assert run(play()) == [b"v%d" % n for n in range(20)]


def test_a_paused_members_writes_land_only_after_it_resumes() -> None:
    async def play() -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
        log, member, store = _store()
        member.pause()
        store[b"k"] = b"v"
        await asyncio.sleep(60.0)  # virtual: far past any latency
        during = dict(log.state)
        member.resume()
        await _drained(store)
        return during, log.state

    during, after = run(play())

    assert (during, after) == ({}, {b"k": b"v"})


def test_a_killed_members_unsent_writes_are_lost() -> None:
    async def play() -> dict[bytes, bytes]:
        log, member, store = _store()
        member.pause()
        store[b"k"] = b"v"
        await asyncio.sleep(1.0)
        member.dead = True  # as Member.kill: dead, then woken
        member.resume()
        await _drained(store)
        return log.state

    assert run(play()) == {}


def test_a_recovery_reads_the_changelog_and_keeps_the_members_unsent_writes() -> None:
    async def play() -> tuple[bytes | None, bytes | None]:
        log, member, store = _store()
        log.land(b"theirs", b"t")
        member.pause()
        store[b"mine"] = b"m"
        store.recover()
        return store.get(b"theirs"), store.get(b"mine")

    assert run(play()) == (b"t", b"m")


def test_a_second_delivery_of_a_claimed_event_is_skipped() -> None:
    async def play() -> tuple[str | None, str | None, str | None]:
        _, _, store = _store()
        first = claim_original(store, "ev1", 3, now_ms=0)
        again = claim_original(store, "ev1", 9, now_ms=1)
        reread = claim_original(store, "ev1", 3, now_ms=2)  # the same record after a crash
        return first, again, reread

    assert run(play()) == (None, "in_progress", None)


#: a schedule whose m18 is delivered again at 638.19 s, after its reply was sent
REDELIVERED = 5001


@pytest.mark.usefixtures("as_found")
def test_a_webhook_delivered_again_after_its_reply_is_skipped_as_a_duplicate() -> None:
    result = run_schedule(Schedule(REDELIVERED))
    events = result.events
    again = next(i for i, e in enumerate(events) if "webhook again: <m18@sim>" in e)

    assert result.passed
    assert "<m18@sim> skipped: duplicate" in events[again + 1]
    assert sum("mail sent <m18@sim>" in e for e in events) == 1


def test_about_half_the_schedules_have_webhooks_delivered_again() -> None:
    seeds = range(200)
    with_them = [s for s in seeds if any(f.kind == "redeliver" for f in Schedule(s).faults)]

    assert 70 < len(with_them) < 130

"""A simulated worker's tables as faust keeps them in RocksDB: a recovery reads the changelog
from the store's own offset on, and a worker restarted on its own disk finds its store as the
kill left it."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest

from testkit.sim import world as worlds
from testkit.sim.broker import Broker
from testkit.sim.events import Changelog, EventsStore
from testkit.sim.io import Actor
from testkit.sim.log import DRAIN_GRACE_S
from testkit.sim.loop import run
from testkit.sim.schedule import Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet")


def _store() -> tuple[Changelog, EventsStore]:
    log = Changelog(1)
    world = SimpleNamespace(event_log=log, loop=asyncio.get_running_loop(), trace=_untraced)
    world.broker = Broker(world, random.Random(1))  # type: ignore[arg-type]
    return log, EventsStore(world, Actor("a1"))  # type: ignore[arg-type]


def _untraced(who: str, what: object) -> None:
    pass


def test_a_recovery_keeps_a_write_of_its_own_the_changelog_never_took() -> None:
    async def play() -> tuple[bytes | None, bytes | None]:
        log, store = _store()
        store.store[b"mine"] = b"m"  # in its RocksDB; the broker lost the changelog's copy
        log.land(b"theirs", b"t")
        store.recover()
        return store.get(b"theirs"), store.get(b"mine")

    assert run(play()) == (b"t", b"m")


def test_a_later_record_of_a_key_replaces_what_the_store_held() -> None:
    async def play() -> tuple[bytes | None, bytes | None]:
        log, store = _store()
        store.store[b"k"] = b"mine"
        store.store[b"gone"] = b"mine"
        log.land(b"k", b"theirs")
        log.land(b"gone", None)  # a tombstone
        store.recover()
        return store.get(b"k"), store.get(b"gone")

    assert run(play()) == (b"theirs", None)


def test_a_recovery_reads_only_the_records_after_the_stores_offset() -> None:
    async def play() -> tuple[int, bytes | None]:
        log, store = _store()
        log.land(b"k", b"first")
        store.recover()
        del store.store[b"k"]  # gone from the store alone: no record after its offset says so
        log.land(b"other", b"o")
        store.recover()
        return store.applied, store.get(b"k")

    assert run(play()) == (1, None)


def test_an_own_write_that_lands_right_after_the_stores_offset_moves_it() -> None:
    async def play() -> tuple[int, int]:
        log, store = _store()
        log.land(b"theirs", b"t")
        store.recover()
        store[b"mine"] = b"m"
        while store._sender is not None:
            await asyncio.sleep(0.001)
        return store.applied, len(log.records)

    assert run(play()) == (1, 2)


def _restarted() -> tuple[str, bytes | None, bytes | None]:
    """A worker that wrote to its events table while paused (nothing sent), killed and
    restarted: the name of its next incarnation and what its store then holds of that
    write and of another member's record that landed meanwhile."""

    async def play() -> tuple[str, bytes | None, bytes | None]:
        world = worlds.World(Schedule(0))
        first = world.start("a")
        first.pause()
        first.events[b"agentmail:mine"] = b"m"
        world.event_log.land(b"agentmail:theirs", b"t")
        world.kill(first, 1.0)
        await asyncio.sleep(1.0 + DRAIN_GRACE_S + 1.0)  # restarted, then assigned
        again = world.members["a"]
        return (
            again.name,
            again.events.get(b"agentmail:mine"),
            again.events.get(b"agentmail:theirs"),
        )

    return run(play())


def test_a_worker_restarted_on_its_own_disk_finds_its_unsent_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worlds, "SAME_DISK", 1.0)

    assert _restarted() == ("a2", b"m", b"t")


def test_a_worker_restarted_on_a_new_host_has_the_changelog_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worlds, "SAME_DISK", 0.0)

    assert _restarted() == ("a2", None, b"t")


def test_no_same_disk_restarts_every_worker_on_a_new_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worlds, "SAME_DISK", 1.0)
    monkeypatch.setattr(worlds.World, "same_disk", False)

    assert _restarted() == ("a2", None, b"t")

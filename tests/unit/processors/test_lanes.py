"""Lanes: each thread's jobs in order, threads concurrently, records acked when done."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError

from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.lanes import Dropped, Job, Lanes


class _Acks:
    def __init__(self) -> None:
        self.acked: list[Any] = []
        self.forgotten: list[Any] = []

    def ack(self, record: Any) -> None:
        self.acked.append(record)

    def forget(self, records: Any) -> None:
        self.forgotten.extend(records)


def _lanes(acks: _Acks, **kw: Any) -> Lanes:
    return Lanes(ack=acks.ack, forget=acks.forget, **kw)


def _job(log: list[str], name: str, delay: float = 0.0, fail: BaseException | None = None) -> Job:
    async def run(job: Job) -> None:
        log.append(f"start {name}")
        await asyncio.sleep(delay)
        if fail is not None:
            raise fail
        log.append(f"end {name}")

    return Job(run, [name])


async def _submitted(*jobs: tuple[bytes, str, float], **kw: Any) -> tuple[Lanes, _Acks, list[str]]:
    """Lanes (``kw`` their options) given ``jobs`` in turn, each (thread, name, seconds it
    runs); with their acks and the log of the jobs' starts and ends."""
    acks, log = _Acks(), []
    lanes = _lanes(acks, **kw)
    for thread, name, delay in jobs:
        await lanes.submit(thread, _job(log, name, delay))
    return lanes, acks, log


async def _idle(lanes: Lanes) -> None:
    while lanes.active:
        await asyncio.sleep(0.005)


async def test_a_threads_jobs_run_in_order() -> None:
    lanes, _, log = await _submitted((b"t", "a", 0.02), (b"t", "b", 0))
    await _idle(lanes)

    assert log == ["start a", "end a", "start b", "end b"]


async def test_a_slow_thread_holds_up_no_other() -> None:
    lanes, acks, _ = await _submitted((b"slow", "slow", 0.2), (b"fast", "fast", 0))
    await asyncio.sleep(0.05)

    assert acks.acked == ["fast"]  # acknowledged while the slow one still runs
    await _idle(lanes)
    assert acks.acked == ["fast", "slow"]


async def test_a_dropped_job_is_not_acknowledged() -> None:
    acks, log = _Acks(), []
    lanes = _lanes(acks)
    await lanes.submit(b"t", _job(log, "a", fail=Dropped("rebalance")))
    await lanes.submit(b"t", _job(log, "b"))
    await _idle(lanes)

    assert acks.acked == ["b"]
    assert acks.forgotten == ["a"]


async def test_submit_waits_while_too_many_records_are_pending() -> None:
    lanes, acks, log = await _submitted((b"t1", "a", 0.05), (b"t2", "b", 0.05), max_pending=2)
    third = asyncio.ensure_future(lanes.submit(b"t3", _job(log, "c")))
    await asyncio.sleep(0.01)

    assert not third.done()
    await asyncio.wait_for(third, 1)
    await _idle(lanes)
    assert sorted(acks.acked) == ["a", "b", "c"]


async def test_drain_lets_running_jobs_finish_within_the_grace() -> None:
    lanes, acks, _ = await _submitted((b"t", "running", 0.05))
    await asyncio.sleep(0.01)

    await lanes.drain(grace_s=1)

    assert acks.acked == ["running"]


async def test_drain_drops_what_runs_past_the_grace_and_what_never_started() -> None:
    lanes, acks, _ = await _submitted((b"t", "slow", 5), (b"t", "queued", 0))
    await asyncio.sleep(0.01)

    dropped = await lanes.drain(grace_s=0.05)

    assert acks.acked == []
    assert sorted(acks.forgotten) == ["queued", "slow"]
    assert dropped == 2
    assert lanes.pending == 0


async def test_a_running_job_absorbs_the_threads_waiting_deliveries() -> None:
    acks, log = _Acks(), []
    lanes = _lanes(acks)
    seen: list[list[Any]] = []

    async def first(job: Job) -> None:
        await asyncio.sleep(0.02)
        waiting = lanes.queued(b"t")
        lanes.absorb(b"t", job, waiting)
        seen.append([w.records[0] for w in waiting])

    await lanes.submit(b"t", Job(first, ["a"]))
    await lanes.submit(b"t", _job(log, "b"))
    await _idle(lanes)

    assert seen == [["b"]]
    assert log == []  # b never ran on its own
    assert acks.acked == ["a", "b"]


async def test_releases_of_held_buffers_count_against_the_pending_bound() -> None:
    # a release carries no record (its deliveries were acknowledged when held): without a
    # weight of its own, a backlog of due threads started a lane task each, unbounded
    release_started = asyncio.Event()
    gate = asyncio.Event()

    async def release(job: Job) -> None:
        release_started.set()
        await gate.wait()

    lanes = _lanes(_Acks(), max_pending=2)
    await lanes.submit(b"t1", Job(release, [], kind="release"))
    await lanes.submit(b"t2", Job(release, [], kind="release"))
    third = asyncio.ensure_future(lanes.submit(b"t3", Job(release, [], kind="release")))
    await release_started.wait()

    assert (lanes.pending, lanes.active, third.done()) == (2, 2, False)
    gate.set()
    await asyncio.wait_for(third, 1)
    await _idle(lanes)
    assert lanes.pending == 0


async def test_a_record_acked_when_landed_waits_for_its_write() -> None:
    acks = _Acks()
    lanes = _lanes(acks)
    landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    lanes.ack_landed("held", landed)
    await asyncio.sleep(0)
    assert acks.acked == []  # the write has not landed

    landed.set_result(None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert acks.acked == ["held"]


async def test_a_record_whose_write_failed_is_never_acked_and_the_worker_fails() -> None:
    error = BrokerUnavailable("the broker did not take it")

    assert await _landing_failed(error) == ([], [error], [])


async def test_a_record_whose_write_the_broker_refused_is_handed_on_not_acked() -> None:
    error = MessageSizeTooLargeError("the hold is larger than the topic takes")

    assert await _landing_failed(error) == ([], [], [error])


async def test_a_refusal_met_after_a_drain_is_left_to_the_partitions_next_owner() -> None:
    # a rebalance drains the lanes before the refusal: the record is read again by its owner
    error = MessageSizeTooLargeError("the hold is larger than the topic takes")

    assert await _landing_failed(error, drained=True) == ([], [], [])


async def _landing_failed(
    error: BaseException, *, drained: bool = False
) -> tuple[list[str], list[BaseException], list[BaseException]]:
    """A held record whose write fails with ``error`` (after a drain, if ``drained``): the
    records acknowledged, the worker's fatal failures, and the records handed on refused."""
    acks, failures, refusals = _Acks(), list[BaseException](), list[BaseException]()
    lanes = _lanes(acks, on_fatal=failures.append)
    landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def refused(exc: BaseException) -> None:
        refusals.append(exc)

    lanes.ack_landed("held", landed, refused=refused)
    if drained:
        await lanes.drain(grace_s=1)
    landed.set_exception(error)
    for _ in range(3):
        await asyncio.sleep(0)
    return acks.acked, failures, refusals

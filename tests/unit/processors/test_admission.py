"""Writer calls admitted by slot, tenant turn, group rate and model pause (real event loop)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
import structlog.testing

from onceonly.processors.exceptions import WriterFailed
from onceonly.processors.flow.admission import Admission, owned_share
from onceonly.processors.flow.rate import Limits, ModelThrottled
from onceonly.processors.flow.tenants import current_tenant
from onceonly.processors.lanes import Lanes
from onceonly.processors.runtime.lifecycle import drain, set_model_share
from onceonly.processors.writer.contract import Decline, Inbound
from onceonly.processors.writer.runner import Burst, Text, Writer, WriterPolicy
from onceonly.schemas.ledger import Usage
from testkit.sim.loop import run

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
FAST = {"backoff_initial_s": 0.001, "backoff_max_s": 0.002}


def _message(n: int = 1) -> Inbound:
    return Inbound("inbox@x", f"<m{n}@x>", "agentmail:t", "t", f"evt-{n}", T0, "c@x", "Hi", "hi")


def test_calls_start_at_the_workers_share_of_the_rate() -> None:
    """On the simulator's virtual loop (testkit.sim.loop): its clock moves only from timer
    to timer, so the spacing is exact and no loaded machine can stretch it."""

    async def body() -> list[float]:
        loop = asyncio.get_running_loop()
        admission = Admission(64, limits=Limits(rpm=12_000, share=0.5), clock=loop.time)
        started: list[float] = []  # 100 calls a second

        async def call() -> None:
            ticket = await admission.enter("t")
            started.append(loop.time())
            admission.leave(ticket, ok=True)

        await asyncio.gather(*(call() for _ in range(31)))
        return started

    started = run(body(), start=1000.0)

    # the k-th call k shares' worth of time after the first, a minute's budget spread over
    # Limits.spread_s (60.5 s): never sooner, nor later
    spacing = Limits().spread_s / 6_000
    assert [at - started[0] for at in started] == pytest.approx(
        [k * spacing for k in range(31)], abs=2e-6
    )


async def test_a_new_share_applies_to_calls_waiting() -> None:
    admission = Admission(8, limits=Limits(rpm=6000, share=0.0))
    waiting = asyncio.ensure_future(admission.enter("t"))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # no partitions, no budget: it waits, it does not fail
    admission.set_share(1.0)  # after one interval (10 ms): a share that rose from zero
    ticket = await asyncio.wait_for(waiting, 1)
    admission.leave(ticket, ok=True)


async def test_a_429_pauses_every_call_then_one_probes() -> None:
    admission = Admission(8)
    first = await admission.enter("t")
    others = [asyncio.ensure_future(admission.enter("t")) for _ in range(4)]
    await asyncio.sleep(0)
    tickets = [await o for o in others]
    for t in tickets:
        admission.leave(t, ok=True)
    admission.leave(first, ok=False, retry_after_s=0.2)
    paused_at = time.monotonic()
    waiters = [asyncio.ensure_future(admission.enter("t")) for _ in range(5)]
    probe = await asyncio.wait_for(asyncio.shield(waiters[0]), 1)
    assert time.monotonic() - paused_at >= 0.19
    assert probe.probe
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters[1:])  # the probe is alone
    admission.leave(probe, ok=True)
    for w in waiters[1:]:
        admission.leave(await asyncio.wait_for(w, 1), ok=True)


async def test_a_flooding_tenant_delays_another_by_one_call_at_most() -> None:
    admission = Admission(2)
    served: list[str] = []

    async def call(tenant: str) -> None:
        ticket = await admission.enter(tenant)
        served.append(tenant)
        await asyncio.sleep(0.01)
        admission.leave(ticket, ok=True)

    flood = [asyncio.ensure_future(call("A")) for _ in range(40)]
    await asyncio.sleep(0.035)
    late = asyncio.ensure_future(call("B"))
    await asyncio.gather(*flood, late)
    position = served.index("B")
    a_before = served[:position].count("A")
    # A had taken ~8 calls by the time B came; B is served within the next 2 slots freed
    assert a_before <= 8 + 2


async def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    admission = Admission(1)
    held = await admission.enter("t")
    waiting = asyncio.ensure_future(admission.enter("t"))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    admission.leave(held, ok=True)
    ticket = await asyncio.wait_for(admission.enter("t"), 1)
    assert admission.in_flight == 1
    admission.leave(ticket, ok=True)
    assert admission.in_flight == 0


def test_the_share_is_the_partitions_owned_of_the_topic() -> None:
    class TP:
        def __init__(self, topic: str, partition: int) -> None:
            self.topic, self.partition = topic, partition

    assigned = [TP("d", 0), TP("d", 3), TP("d-changelog", 1), TP("other", 2)]
    assert owned_share(assigned, "d", 8) == 0.25
    assert owned_share([], "d", 8) == 0.0


async def test_429s_count_no_attempt_and_the_call_is_answered_after_the_pause() -> None:
    calls: list[float] = []

    async def throttled(burst: Burst) -> str:
        calls.append(time.monotonic())
        if len(calls) <= 4:
            raise ModelThrottled(0.05)
        if len(calls) == 5:
            raise RuntimeError("500")  # the one failure that counts: attempt 1 of 2
        return "ok"

    writer = Writer(throttled, WriterPolicy(attempts=2, **FAST))
    assert await writer.write([_message()]) == "ok"
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert len(calls) == 6
    assert min(gaps[:4]) >= 0.045  # each try waited for the pause, not for a backoff


async def test_other_failures_still_count_their_attempts() -> None:
    async def broken(burst: Burst) -> str:
        raise RuntimeError("500")

    with pytest.raises(WriterFailed):
        await Writer(broken, WriterPolicy(attempts=2, **FAST)).write([_message()])


async def test_reported_usage_comes_back_with_the_text_summed_over_attempts() -> None:
    seen: list[Usage] = []

    async def costly(burst: Burst) -> str:
        burst.report_usage("m1", 100, 20)
        if burst.attempt == 1:
            raise RuntimeError("500")
        return "Hello"

    writer = Writer(costly, WriterPolicy(attempts=2, **FAST), on_usage=seen.append)
    written = await writer.write([_message()])
    assert isinstance(written, Text) and written == "Hello"
    assert written.usage == Usage("m1", 200, 40)
    assert seen == [Usage("m1", 100, 20), Usage("m1", 100, 20)]


async def test_a_decline_carries_its_usage_and_no_report_means_none() -> None:
    async def declines(burst: Burst) -> Decline:
        burst.report_usage("m1", 7, 1)
        return Decline("auto-reply")

    written = await Writer(declines).write([_message()])
    assert isinstance(written, Decline) and written.usage == Usage("m1", 7, 1)
    plain = await Writer(lambda burst: "Hi").write([_message()])
    assert type(plain) is str


async def test_the_writer_waits_in_its_tenants_turn() -> None:
    admission = Admission(1, per_tenant=1)
    order: list[str] = []

    async def write(burst: Burst) -> str:
        order.append(current_tenant.get())
        await asyncio.sleep(0.005)
        return "ok"

    writer = Writer(write, admission=admission)

    async def as_tenant(tenant: str, n: int) -> object:
        current_tenant.set(tenant)
        return await writer.write([_message(n)])

    await asyncio.gather(*(as_tenant("A", n) for n in range(6)), as_tenant("B", 99))
    assert order.index("B") <= 2


class _Gauge:
    value = -1.0

    def set(self, value: float) -> None:
        self.value = value


async def test_a_drain_for_a_rebalance_starts_no_call_on_the_revoked_share() -> None:
    # the partitions go to their next owner, which paces them from its assignment on:
    # a call of this worker's waiting meanwhile would be one more in the group's minute
    admission = Admission(8, limits=Limits(rpm=6000, share=1.0))
    gauge = _Gauge()
    parts = SimpleNamespace(
        writer=SimpleNamespace(admission=admission),
        metrics=SimpleNamespace(model_share=gauge),
        lanes=Lanes(ack=lambda records: None),
    )
    await drain(parts, grace_s=0.01)
    waiting = asyncio.ensure_future(admission.enter("t"))
    await asyncio.sleep(0)  # it asked, and the admission answered: wait
    assert not waiting.done()
    assert admission.limits.delay(time.monotonic()) == float("inf")
    assert gauge.value == 0.0  # shown as the operator's onceonly_model_share
    set_model_share(parts, 0.5)  # the rebalance completed
    ticket = await asyncio.wait_for(waiting, 1)
    admission.leave(ticket, ok=True)
    assert gauge.value == 0.5


async def test_a_sync_call_past_its_timeout_keeps_its_slot_until_its_thread_ends() -> None:
    # a sync call past its timeout runs on in its thread (a thread cannot be cancelled);
    # had its slot gone to the next call, that one would wait for the thread and reach the
    # model well after the rate admitted it (0.8 s here): it is admitted once the thread
    # is free, and starts within the rate's margin (Limits.spread_s - 60 s) of that
    release = threading.Event()
    admitted: list[float] = []
    started: dict[str, list[float]] = {}

    def sync_writer(burst: Burst) -> str:
        started.setdefault(burst.latest.message_id, []).append(time.monotonic())
        if burst.latest.message_id == "<m1@x>":
            release.wait(10)  # a model call that hangs past the timeout
        return "ok"

    admit = lambda _waited: admitted.append(time.monotonic())  # noqa: E731
    admission = Admission(1, limits=Limits(rpm=6000), on_admit=admit)
    writer = Writer(sync_writer, WriterPolicy(1, 1.0, 1, **FAST), admission=admission)
    with pytest.raises(WriterFailed):
        await writer.write([_message(1)])  # timed out; its thread still waits
    asyncio.get_running_loop().call_later(0.8, release.set)
    try:
        assert await writer.write([_message(2)]) == "ok"
    finally:
        release.set()
        writer.close()

    (start,) = started["<m2@x>"]  # asked once, on its first attempt
    since = start - max(a for a in admitted if a <= start)
    assert since <= Limits().spread_s - 60.0
    assert admission.in_flight == 0  # and the thread's end gave the slot back


async def _freed(writer: Writer, release: threading.Event) -> None:
    """The hung sync call's thread let go, and (up to 2 s) its slot given back."""
    release.set()
    for _ in range(200):
        if writer.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    writer.close()


async def test_a_sync_probe_answered_after_its_timeout_ends_the_probing() -> None:
    # after a 429's pause one call probes alone; a sync probe given up at its timeout but
    # answered later in its thread shows the model answers again: the calls after it are
    # no longer sent one at a time (each was a probe, alone, until one answered in time)
    release = threading.Event()

    def sync_writer(burst: Burst) -> str:
        release.wait(10)  # the probe hangs past its timeout, then the model answers it
        return "ok"

    admission = Admission(4)
    admission.leave(await admission.enter("t"), ok=False, retry_after_s=0.01)  # a 429
    writer = Writer(sync_writer, WriterPolicy(1, 0.2, 1, **FAST), admission=admission)
    with pytest.raises(WriterFailed):
        await writer.write([_message(1)])
    await _freed(writer, release)

    both = asyncio.gather(admission.enter("t"), admission.enter("t"))
    tickets = await asyncio.wait_for(both, 2)
    assert [t.probe for t in tickets] == [False, False]


async def test_usage_a_sync_call_reports_after_its_timeout_is_counted_when_its_thread_ends() -> (
    None
):
    release = threading.Event()
    seen: list[Usage] = []

    def sync_writer(burst: Burst) -> str:
        release.wait(10)
        burst.report_usage("m", 10, 5)  # the model answered, after the timeout
        return "ok"

    writer = Writer(sync_writer, WriterPolicy(1, 0.2, 1, **FAST), on_usage=seen.append)
    with pytest.raises(WriterFailed):
        await writer.write([_message(1)])
    assert writer.in_flight == 1  # its thread runs on, and keeps its slot
    await _freed(writer, release)
    assert writer.in_flight == 0
    assert seen == [Usage("m", 10, 5)]


async def test_a_slot_held_past_the_timeout_is_logged_when_held_and_when_freed() -> None:
    release = threading.Event()
    writer = Writer(lambda burst: release.wait(10) and "ok", WriterPolicy(1, 0.2, 1, **FAST))
    with structlog.testing.capture_logs() as logs, pytest.raises(WriterFailed):
        await writer.write([_message(1)])
    assert [e["slots_taken"] for e in logs if "runs on in its thread" in e["event"]] == [1]
    with structlog.testing.capture_logs() as logs:
        await _freed(writer, release)
    assert [e["event"] for e in logs if "held_s" in e] == [
        "writer call past its timeout ended; its slot is free"
    ]

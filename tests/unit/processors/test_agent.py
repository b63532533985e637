"""The writer step: bounded, timed out, retried, off the event loop; text, None or Decline."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from onceonly.processors.exceptions import BrokerUnavailable, Fenced, WriterFailed
from onceonly.processors.writer.contract import Decline, Inbound, ThreadMessage
from onceonly.processors.writer.runner import Burst, Writer, WriterPolicy, outcome_of

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
FAST = {"backoff_initial_s": 0.001, "backoff_max_s": 0.002}


def _message(n: int = 1) -> Inbound:
    return Inbound("inbox@x", f"<m{n}@x>", "agentmail:t", "t", f"evt-{n}", T0, "c@x", "Hi", "hi")


def test_text_is_the_reply() -> None:
    assert outcome_of("Thanks!") == "Thanks!"


def test_none_is_a_decline() -> None:
    assert isinstance(outcome_of(None), Decline)


def test_a_decline_keeps_its_reason() -> None:
    assert outcome_of(Decline("spam")) == Decline("spam")


@pytest.mark.parametrize("value", ["", "   ", 42, b"bytes"])
def test_anything_else_is_refused(value: Any) -> None:
    with pytest.raises(Exception, match="return a non-empty str, None or Decline"):
        outcome_of(value)


async def test_a_writer_that_raises_once_is_called_again() -> None:
    calls: list[int] = []

    async def flaky(burst: Burst) -> str:
        calls.append(burst.attempt)
        if len(calls) == 1:
            raise RuntimeError("429")
        return "ok"

    assert await Writer(flaky, WriterPolicy(attempts=3, **FAST)).write([_message()]) == "ok"
    assert calls == [1, 2]


async def test_a_writer_that_always_raises_fails_after_its_attempts() -> None:
    calls: list[int] = []

    async def broken(burst: Burst) -> str:
        calls.append(1)
        raise RuntimeError("503 from the model")

    with pytest.raises(WriterFailed) as failed:
        await Writer(broken, WriterPolicy(attempts=3, **FAST)).write([_message()])

    assert len(calls) == 3
    assert failed.value.attempts == 3
    assert "503 from the model" in failed.value.last_error


async def test_a_wrong_return_type_is_not_retried() -> None:
    calls: list[int] = []

    async def buggy(burst: Burst) -> Any:
        calls.append(1)
        return 42

    with pytest.raises(WriterFailed):
        await Writer(buggy, WriterPolicy(attempts=3, **FAST)).write([_message()])

    assert calls == [1]


async def test_a_call_past_the_timeout_is_a_failure() -> None:
    async def hangs(burst: Burst) -> str:
        await asyncio.sleep(60)
        return "never"

    with pytest.raises(WriterFailed, match="WriterTimeout"):
        await Writer(hangs, WriterPolicy(timeout_s=0.05, attempts=2, **FAST)).write([_message()])


async def test_no_more_calls_than_the_concurrency_run_at_once() -> None:
    running, most = [0], [0]

    async def model(burst: Burst) -> str:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.02)
        running[0] -= 1
        return "ok"

    writer = Writer(model, WriterPolicy(concurrency=3))
    await asyncio.gather(*(writer.write([_message(n)]) for n in range(10)))

    assert most[0] == 3


async def test_a_sync_writer_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def blocking(burst: Burst) -> str:
        seen.append(threading.get_ident())
        time.sleep(0.2)
        return "ok"

    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1

    writer = Writer(blocking, WriterPolicy(concurrency=4))
    await asyncio.gather(writer.write([_message()]), heartbeat())
    writer.close()

    assert seen and seen[0] != loop_thread
    assert ticks == 10  # the loop went on while the writer blocked


async def test_sync_writers_overlap_up_to_the_concurrency() -> None:
    # each call returns only once all four are in flight at once: one after another, the
    # first would wait out the barrier (10 s) and fail; no wall-clock bound to miss on a
    # busy machine
    together = threading.Barrier(4, timeout=10.0)

    def blocking(burst: Burst) -> str:
        together.wait()
        return "ok"

    writer = Writer(blocking, WriterPolicy(concurrency=4, attempts=1))
    written = await asyncio.gather(*(writer.write([_message(n)]) for n in range(4)))
    writer.close()

    assert list(written) == ["ok"] * 4


async def test_the_history_is_read_once_and_only_when_asked() -> None:
    reads: list[int] = []
    earlier = (ThreadMessage("<m0@x>", "c@x", "first", T0),)

    async def history() -> tuple[ThreadMessage, ...]:
        reads.append(1)
        return earlier

    async def uses_it(burst: Burst) -> str:
        seen = await burst.history()
        again = await burst.history()
        return f"{len(seen)} {len(again)}"

    async def ignores_it(burst: Burst) -> str:
        return "ok"

    await Writer(ignores_it).write([_message()], history=history)
    assert reads == []
    assert await Writer(uses_it).write([_message()], history=history) == "1 1"
    assert reads == [1]


def test_a_sync_writer_reads_the_history_through_the_loop() -> None:
    earlier = (ThreadMessage("<m0@x>", "c@x", "first", T0),)

    async def history() -> tuple[ThreadMessage, ...]:
        return earlier

    def sync_writer(burst: Burst) -> str:
        return f"{len(burst.history_sync())} earlier"

    async def run() -> Any:
        writer = Writer(sync_writer)
        try:
            return await writer.write([_message()], history=history)
        finally:
            writer.close()

    assert asyncio.run(run()) == "1 earlier"


async def test_the_burst_is_the_messages_in_order() -> None:
    given: list[list[str]] = []

    def writer(burst: Burst) -> str:
        given.append([m.message_id for m in burst])
        return "ok"

    await Writer(writer).write([_message(1), _message(2)])

    assert given == [["<m1@x>", "<m2@x>"]]


async def test_a_cancelled_call_is_not_made_again() -> None:
    # tenacity's attempt catches every BaseException: a drain's cancel was retried
    started: list[int] = []
    entered = asyncio.Event()

    async def slow(burst: Burst) -> str:
        started.append(burst.attempt)
        entered.set()
        await asyncio.sleep(3600)
        return "never"

    task = asyncio.create_task(Writer(slow, WriterPolicy(attempts=3, **FAST)).write([_message()]))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert started == [1]


async def test_a_fenced_call_is_neither_retried_nor_a_writer_failure() -> None:
    calls: list[int] = []

    async def fenced(burst: Burst) -> str:
        calls.append(burst.attempt)
        raise Fenced("partition 3 is another worker's now")

    with pytest.raises(Fenced):
        await Writer(fenced, WriterPolicy(attempts=3, **FAST)).write([_message()])
    assert calls == [1]


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
async def test_an_effect_the_broker_did_not_take_is_neither_retried_nor_a_writer_failure(
    asynchronous: bool,
) -> None:
    """A writer's effect whose ledger record the broker did not take (it may have landed):
    the worker's failure, not the writer's (F36), so no *failed* record and no
    ``writer_failed`` letter; the worker exits and reads the burst again."""
    calls: list[int] = []
    away = BrokerUnavailable("the broker did not take a write to the ledger's changelog")

    async def effect(burst: Burst) -> str:
        calls.append(burst.attempt)
        raise away

    def effect_sync(burst: Burst) -> str:
        calls.append(burst.attempt)
        raise away

    writer = effect if asynchronous else effect_sync
    with pytest.raises(BrokerUnavailable):
        await Writer(writer, WriterPolicy(attempts=3, **FAST)).write([_message()])
    assert calls == [1]


async def test_a_sync_writer_runs_in_the_callers_context() -> None:
    # faust's tables find the record being answered through a context variable
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current")
    current.set("record 7")

    def sync(burst: Burst) -> str:
        return f"written for {current.get('no record')}"

    assert await Writer(sync, WriterPolicy(**FAST)).write([_message()]) == "written for record 7"

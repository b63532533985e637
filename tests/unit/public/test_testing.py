"""``onceonly.testing``: a user's writer called as the worker calls it, with no broker."""

from __future__ import annotations

import threading

import pytest

from onceonly import Burst, Decline, Draft, EffectConflict, ThreadMessage, WriterFailed
from onceonly.testing import MemoryLedger, call_writer, inbound, make_burst


async def test_an_async_writer_gets_the_messages_oldest_first() -> None:
    async def writer(burst: Burst) -> str:
        return " / ".join(m.text or "" for m in burst)

    written = await call_writer(writer, inbound("first"), inbound("second", message_id="<m2@x>"))

    assert written == "first / second"


async def test_a_sync_writer_runs_off_the_loop_and_reads_the_history() -> None:
    seen: list[str] = []

    def writer(burst: Burst) -> str:
        seen.append(threading.current_thread().name)
        earlier = burst.history_sync()
        return f"{len(earlier)} earlier: {earlier[0].text}"

    before = ThreadMessage("<m0@x>", "agent@example.com", "we shipped it", None, own=True)
    written = await call_writer(writer, inbound("where is it?"), history=[before])

    assert written == "1 earlier: we shipped it"
    assert seen and seen[0] != threading.current_thread().name


async def test_none_is_a_decline_as_in_the_worker() -> None:
    async def writer(burst: Burst) -> None:
        return None

    assert isinstance(await call_writer(writer, inbound("hi")), Decline)


async def test_a_draft_comes_back_as_a_draft() -> None:
    async def writer(burst: Burst) -> Draft:
        return Draft("a refund is on its way", reason="refund")

    assert await call_writer(writer, inbound("refund?")) == Draft(
        "a refund is on its way", reason="refund"
    )


async def test_a_wrong_return_value_fails_as_the_worker_dead_letters_it() -> None:
    async def writer(burst: Burst) -> int:
        return 42

    with pytest.raises(WriterFailed, match="returned int"):
        await call_writer(writer, inbound("hi"))


async def test_the_reported_usage_is_on_the_reply() -> None:
    async def writer(burst: Burst) -> str:
        burst.report_usage("small-model", 120, 30)
        return "thanks"

    written = await call_writer(writer, inbound("hi"))

    usage = getattr(written, "usage", None)
    assert usage is not None
    assert (usage.model, usage.input_tokens, usage.output_tokens) == ("small-model", 120, 30)


async def test_an_effect_is_performed_once_per_message_and_action() -> None:
    performed: list[str] = []

    async def writer(burst: Burst) -> str:
        await burst.effects.once("label", {"label": "answered"}, performed.append)
        return "done"

    ledger = MemoryLedger()
    message = inbound("hi")
    await call_writer(writer, message, ledger=ledger)
    await call_writer(writer, message, ledger=ledger)

    assert len(performed) == 1 and performed[0].startswith("effect-")


async def test_a_sync_writers_effect_goes_through_once_sync() -> None:
    performed: list[str] = []

    def writer(burst: Burst) -> str:
        burst.effects.once_sync("ticket", {"queue": "billing"}, performed.append)
        return "done"

    await call_writer(writer, inbound("hi"))

    assert len(performed) == 1


async def test_the_same_action_with_another_payload_is_refused() -> None:
    ledger = MemoryLedger()
    burst = make_burst(inbound("hi"), ledger=ledger)
    await burst.effects.once("label", {"label": "a"}, lambda key: None)

    with pytest.raises(EffectConflict):
        await make_burst(inbound("hi"), ledger=ledger).effects.once(
            "label", {"label": "b"}, lambda key: None
        )


async def test_make_burst_history_is_what_was_given() -> None:
    before = ThreadMessage("<m0@x>", "c@x", "earlier", None)

    assert await make_burst(inbound("now"), history=[before]).history() == (before,)


def test_a_burst_needs_a_message() -> None:
    with pytest.raises(ValueError, match="at least one message"):
        make_burst()

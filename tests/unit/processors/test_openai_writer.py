"""The openai example writer, through the real ``openai`` SDK against a local server."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from openai import AsyncOpenAI, RateLimitError

from onceonly.processors.writer.contract import Decline, Inbound, ThreadMessage
from onceonly.processors.writer.openai import OpenAIWriter
from onceonly.processors.writer.runner import Writer, WriterPolicy
from testkit.fakes.openai_server import FakeChatModel

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MESSAGE = Inbound("s@x", "<m1@x>", "agentmail:t", "t", "e1", T0, "c@x", "Move", "Friday?")


def _writer(model: FakeChatModel) -> OpenAIWriter:
    client = AsyncOpenAI(api_key="test", base_url=f"{model.base_url}/v1", max_retries=0)
    return OpenAIWriter(client, model="local-model")


async def _history() -> list[ThreadMessage]:
    return [
        ThreadMessage("<m0@x>", "c@x", "Can we meet?", T0),
        ThreadMessage("<r0@x>", "s@x", "Yes, Thursday.", T0, own=True),
    ]


async def test_the_reply_is_the_models_answer(model: FakeChatModel) -> None:
    model.answer = lambda messages: "Friday works."

    text = await Writer(_writer(model)).write([MESSAGE], history=_history)

    assert text == "Friday works."


async def test_the_model_sees_the_thread_and_the_burst_in_order(model: FakeChatModel) -> None:
    await Writer(_writer(model)).write([MESSAGE], history=_history)

    sent: list[dict[str, Any]] = model.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2]["content"] == "Yes, Thursday."
    assert sent[3]["content"].endswith("Friday?")
    assert model.requests[0]["model"] == "local-model"


async def test_no_reply_from_the_model_is_a_decline(model: FakeChatModel) -> None:
    model.answer = lambda messages: "NO_REPLY"

    assert isinstance(await Writer(_writer(model)).write([MESSAGE]), Decline)


async def test_a_429_is_retried_by_the_worker_not_the_sdk(model: FakeChatModel) -> None:
    model.fail_next = [429]

    text = await Writer(_writer(model), WriterPolicy(backoff_initial_s=0.001)).write([MESSAGE])

    assert text == "Thanks for your message."
    assert len(model.requests) == 2


async def test_the_sdks_error_reaches_the_worker(model: FakeChatModel) -> None:
    model.fail_next = [429]
    burst: Any = [MESSAGE]

    class _Burst(list[Inbound]):
        async def history(self) -> list[ThreadMessage]:
            return []

    with pytest.raises(RateLimitError):
        await _writer(model)(_Burst(burst))  # type: ignore[arg-type]


async def test_the_tokens_the_model_reports_come_back_with_the_reply(
    model: FakeChatModel,
) -> None:
    from onceonly.schemas.ledger import Usage

    model.usage = (812, 64)
    seen: list[Usage] = []

    text = await Writer(_writer(model), on_usage=seen.append).write([MESSAGE])

    assert getattr(text, "usage", None) == Usage("local-model", 812, 64)
    assert seen == [Usage("local-model", 812, 64)]


async def test_a_429_with_retry_after_pauses_every_call_of_the_worker(
    model: FakeChatModel,
) -> None:
    import asyncio

    model.throttle(seconds=1.0, retry_after_s=0.5)
    writer = Writer(_writer(model), WriterPolicy(attempts=1, backoff_initial_s=0.001))

    texts = await asyncio.gather(*(writer.write([MESSAGE]) for _ in range(8)))

    assert texts == ["Thanks for your message."] * 8
    refused = [at for at, status in model.calls if status == 429]
    first = model.calls[0][0]
    # the 8 calls of the first moment, then one probe per pause: never 8 again
    later = [at for at in refused if at > first + 0.1]
    assert len(later) <= 2
    assert all(b - a >= 0.45 for a, b in itertools.pairwise(later))
    assert len([s for _, s in model.calls if s == 200]) == 8

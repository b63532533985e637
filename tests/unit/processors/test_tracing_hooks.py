"""The tracing hooks in ingest and the worker: the record's W3C context, kept through the
hold; the hold span; the openai writer's GenAI report (SDK in-memory exporter)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from openai import AsyncOpenAI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from onceonly.foundation import tracing
from onceonly.ingest import normalise
from onceonly.ingest.app import _record
from onceonly.processors.dedupe.claims import claim
from onceonly.processors.reorder.holds import Delivery, Holds
from onceonly.processors.writer.contract import Inbound
from onceonly.processors.writer.openai import OpenAIWriter
from onceonly.processors.writer.runner import Writer
from onceonly.schemas.envelope import REPLAY_HEADER
from testkit import payloads
from testkit.fakes.openai_server import FakeChatModel
from tests.unit._spans import named
from tests.unit._spans import spans as spans

NOW_MS = 1_000_000
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _envelope(thread: str = "t1") -> normalise.Envelope:
    body = payloads.dumps(payloads.agentmail_received(thread_id=thread))
    return normalise.agentmail(body.decode(), {}, datetime.now(UTC))


def test_a_record_built_in_a_delivery_span_carries_its_context(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.delivery("agentmail"):
        record = _record(_envelope())

    (span,) = spans.get_finished_spans()
    assert dict(record.headers)["traceparent"].decode().split("-")[1:3] == [
        f"{span.context.trace_id:032x}",
        f"{span.context.span_id:016x}",
    ]


def test_off_a_record_has_no_trace_header() -> None:
    assert "traceparent" not in dict(_record(_envelope()).headers)


def test_the_context_is_kept_through_the_hold_and_the_hold_is_a_span_under_it(
    spans: InMemorySpanExporter,
) -> None:
    headers = {"traceparent": PARENT.encode(), REPLAY_HEADER: b"1", "event-id": b"e"}
    delivery = Delivery.of(_envelope(), (0, 7), headers)
    holds = Holds({}, window_ms=2000)

    holds.hold(delivery, now_ms=NOW_MS)
    (taken,) = holds.take(delivery.envelope.thread_key.encode(), now_ms=NOW_MS + 5000)

    assert delivery.replay
    assert taken.trace == delivery.trace == (("traceparent", PARENT),)
    hold = named(spans)["onceonly.hold"]
    assert f"{hold.context.trace_id:032x}" == PARENT.split("-")[1]
    assert f"{hold.parent.span_id:016x}" == PARENT.split("-")[2]  # type: ignore[union-attr]
    assert (hold.attributes or {})["onceonly.verdict"] == "held"


def test_off_a_delivery_keeps_no_context() -> None:
    delivery = Delivery.of(_envelope(), (0, 7), {"traceparent": PARENT.encode()})

    assert delivery.trace == ()
    assert not delivery.replay


def test_dedupe_is_a_span_with_its_counts_and_an_empty_claim_is_none(
    spans: InMemorySpanExporter,
) -> None:
    delivery = Delivery(_envelope(), (0, 7))

    assert claim({}, [], now_ms=NOW_MS, metrics=None) == []  # nothing newer came: no span
    assert claim({}, [delivery], now_ms=NOW_MS, metrics=None) == [delivery]

    (span,) = spans.get_finished_spans()
    assert span.name == "onceonly.dedupe"
    assert dict(span.attributes or {}) == {"onceonly.deliveries": 1, "onceonly.accepted": 1}


@pytest.fixture
async def model() -> AsyncIterator[FakeChatModel]:
    async with FakeChatModel(lambda messages: "Friday works.").serving() as fake:
        yield fake


async def test_the_openai_writer_reports_the_model_and_the_usage_of_its_response(
    spans: InMemorySpanExporter, model: FakeChatModel
) -> None:
    client = AsyncOpenAI(api_key="test", base_url=f"{model.base_url}/v1", max_retries=0)
    message = Inbound("s@x", "<m1@x>", "agentmail:t", "t", "e1", datetime.now(UTC), "c@x", "", "Hi")

    with tracing.writing("reply-1"):
        text = await Writer(OpenAIWriter(client, model="local-model")).write([message])

    assert text == "Friday works."
    (span,) = spans.get_finished_spans()
    assert span.name == "chat local-model"
    attributes = span.attributes or {}
    assert attributes["gen_ai.request.model"] == "local-model"
    assert attributes["gen_ai.usage.input_tokens"] == 10  # the fake server's usage
    assert attributes["gen_ai.usage.output_tokens"] == 5

"""The OpenTelemetry seam: when it traces, what each helper records, and its W3C context in
a record's headers, asserted on the spans the SDK's in-memory exporter holds."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from onceonly.foundation import tracing
from onceonly.foundation.errors import ConfigError
from tests.unit._spans import named as _named
from tests.unit._spans import spans as spans

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


# -- when it traces ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "app_provider", "expected"),
    [
        ({}, False, "off"),
        (ENDPOINT, False, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, False, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False, "off"),
        ({}, True, "app"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, False, "otlp"),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False, "off"),
        ({"OTEL_SDK_DISABLED": "TRUE"}, True, "off"),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False, "off"),
    ],
)
def test_the_mode_follows_the_otel_variables(
    environ: dict[str, str], app_provider: bool, expected: str
) -> None:
    assert tracing.mode(environ, app_provider=app_provider) == expected


def test_a_grpc_endpoint_is_refused_with_what_to_do() -> None:
    environ = {**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}

    with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='grpc'.*4318"):
        tracing.mode(environ, app_provider=False)


def test_an_endpoint_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)

    with pytest.raises(ConfigError, match=r"pip install 'onceonly\[otel\]'"):
        tracing.configure("test", environ=ENDPOINT)
    assert not tracing.enabled()


class _Sender:
    async def reply(self, record: Any) -> str:
        return "<sent@x>"

    async def find_reply(self, record: Any) -> str | None:
        return None


def test_off_every_helper_is_the_null_span_and_no_header_is_added() -> None:
    assert tracing.configure("test", environ={}) == "off"
    headers = [("onceonly-schema", b"envelope/1")]
    sender = _Sender()

    assert tracing.with_context(headers) is headers
    assert tracing.carrier([("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]) == ()
    assert tracing.delivery("agentmail") is tracing.OFF
    assert tracing.hold((), "e1") is tracing.OFF
    assert tracing.writing("reply-1") is tracing.OFF
    assert tracing.traced_sender(sender) is sender
    tracing.report_model_call(model="m", input_tokens=1)  # nothing to report to: no error


# -- one trace, from ingest's span through the record's headers ----------------------------
def test_the_delivery_context_rides_in_the_headers_and_parents_the_worker_spans(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.delivery("agentmail") as span:
        span.set("http.response.status_code", 204)
        headers = tracing.with_context([("onceonly-schema", b"envelope/1")])
        tracing.stored("evt_1", "message.received", "deliveries", 3, 42)
    carrier = tracing.carrier(headers)
    with tracing.hold(carrier, "evt_1"):
        pass
    with tracing.process([carrier], "agentmail:t1"), tracing.step("dedupe", deliveries=1):
        pass

    found = _named(spans)
    deliver = found["onceonly.deliver"]
    assert deliver.kind is SpanKind.SERVER
    assert deliver.attributes is not None
    assert deliver.attributes["onceonly.event_id"] == "evt_1"
    assert deliver.attributes["messaging.destination.partition.id"] == "3"
    assert deliver.attributes["messaging.kafka.offset"] == 42
    assert [name for name, _ in headers] == ["onceonly-schema", "traceparent"]
    trace_id = deliver.context.trace_id
    assert tracing.trace_id(headers) == f"{trace_id:032x}"
    for name in ("onceonly.hold", "onceonly.process", "onceonly.dedupe"):
        assert found[name].context.trace_id == trace_id, name
    assert found["onceonly.hold"].parent.span_id == deliver.context.span_id  # type: ignore[union-attr]
    assert found["onceonly.process"].parent.span_id == deliver.context.span_id  # type: ignore[union-attr]
    assert found["onceonly.dedupe"].parent.span_id == found["onceonly.process"].context.span_id  # type: ignore[union-attr]


def test_a_burst_is_processed_under_its_first_trace_and_links_the_others(
    spans: InMemorySpanExporter,
) -> None:
    carriers = []
    for provider in ("a", "b"):
        with tracing.delivery(provider):
            carriers.append(tracing.carrier(tracing.with_context([])))
    with tracing.process(carriers, "agentmail:t1"):
        pass

    delivered = [s for s in spans.get_finished_spans() if s.name == "onceonly.deliver"]
    process = _named(spans)["onceonly.process"]
    assert process.context.trace_id == delivered[0].context.trace_id
    assert [link.context.trace_id for link in process.links] == [delivered[1].context.trace_id]
    assert process.attributes is not None and process.attributes["onceonly.deliveries"] == 2


def test_the_writer_span_takes_the_genai_attributes_the_writer_reports(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.writing("reply-1"):
        tracing.report_model_call(model="smollm2", input_tokens=30, output_tokens=7)
        tracing.report_model_call(
            model="smollm2", input_tokens=31, output_tokens=8, response_model="smollm2-q4"
        )

    (span,) = spans.get_finished_spans()
    assert span.name == "chat smollm2"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "onceonly.reply_key": "reply-1",
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "smollm2",
        "gen_ai.response.model": "smollm2-q4",
        "gen_ai.usage.input_tokens": 61,  # two calls (a retry): their tokens add up
        "gen_ai.usage.output_tokens": 15,
    }


def test_a_report_outside_a_writer_span_changes_no_span(spans: InMemorySpanExporter) -> None:
    with tracing.step("dedupe"):
        tracing.report_model_call(model="m", input_tokens=1)

    (span,) = spans.get_finished_spans()
    assert span.name == "onceonly.dedupe"
    assert "gen_ai.request.model" not in (span.attributes or {})


class _Record:
    key = "reply-1"
    channel = "agentmail"


class _Failing(_Sender):
    async def reply(self, record: Any) -> str:
        raise RuntimeError("502 from the mail API")


async def test_a_send_is_a_client_span_with_the_sent_id_and_a_failed_one_is_an_error(
    spans: InMemorySpanExporter,
) -> None:
    assert await tracing.traced_sender(_Sender()).reply(_Record()) == "<sent@x>"
    with pytest.raises(RuntimeError):
        await tracing.traced_sender(_Failing()).reply(_Record())

    sent, failed = spans.get_finished_spans()
    assert sent.name == "onceonly.send" and sent.kind is SpanKind.CLIENT
    assert sent.attributes is not None
    assert sent.attributes["onceonly.sent_message_id"] == "<sent@x>"
    assert sent.attributes["onceonly.reply_key"] == "reply-1"
    assert sent.attributes["onceonly.channel"] == "agentmail"
    assert failed.status.status_code is StatusCode.ERROR
    assert "502 from the mail API" in (failed.status.description or "")


async def test_a_thread_read_and_a_writer_call_without_a_model_report_are_client_spans(
    spans: InMemorySpanExporter,
) -> None:
    await tracing.traced_sender(_Sender()).find_reply(_Record())
    with tracing.writing("reply-2"):
        pass

    found, written = spans.get_finished_spans()
    assert (found.name, found.kind) == ("onceonly.find_reply", SpanKind.CLIENT)
    assert dict(found.attributes or {}) == {
        "onceonly.reply_key": "reply-1",
        "onceonly.channel": "agentmail",
    }
    assert (written.name, written.kind) == ("onceonly.write", SpanKind.CLIENT)
    assert dict(written.attributes or {}) == {"onceonly.reply_key": "reply-2"}


class _Delivery:
    def __init__(self, trace: tracing.Carrier) -> None:
        self.trace = trace
        self.envelope = type("E", (), {"thread_key": "agentmail:t9"})()


class _Pipeline:
    @tracing.processing
    async def process(self, job: Any, deliveries: list[_Delivery], *, key: bytes | None) -> str:
        with tracing.step("dedupe"):
            return "done"


async def test_the_process_decorator_puts_every_step_under_the_process_span(
    spans: InMemorySpanExporter,
) -> None:
    assert await _Pipeline().process(None, [_Delivery(())], key=None) == "done"

    found = _named(spans)
    assert found["onceonly.dedupe"].parent.span_id == found["onceonly.process"].context.span_id  # type: ignore[union-attr]
    assert (found["onceonly.process"].attributes or {})["onceonly.thread_key"] == "agentmail:t9"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "0af7651916cd43dd8448eb211c80319c",
        ),
        (b"00-00000000000000000000000000000000-b7ad6b7169203331-01", None),  # invalid per W3C
        (b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b71", None),
        (b"garbage", None),
    ],
)
def test_the_trace_id_is_read_from_a_valid_traceparent_only(
    value: bytes, expected: str | None
) -> None:
    assert tracing.trace_id([("event-id", b"e1"), ("traceparent", value)]) == expected

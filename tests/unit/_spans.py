"""Tracing on, into the SDK's in-memory exporter, for one unit test (off again after it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from onceonly.foundation import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.configure("test", provider=provider, environ={}) == "app"
    yield exporter
    assert tracing.configure("test", environ={}) == "off"


def named(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The finished spans by name (the last of a name wins)."""
    return {span.name: span for span in exporter.get_finished_spans()}

"""``onceonly trace`` prints the OpenTelemetry trace id each delivery's record carries."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from onceonly.ingest import normalise
from onceonly.operations.trace import Record, Sources, assemble, render_text, to_json
from onceonly.schemas.envelope import Envelope
from testkit import payloads

T0 = 1_764_583_200_000
FIRST = "0af7651916cd43dd8448eb211c80319c"
SECOND = "4bf92f3577b34da6a3ce929d0e0e4736"


def _envelope(event_id: str) -> Envelope:
    payload = payloads.agentmail_received(
        inbox_id="s@x", thread_id="thr-1", message_id="<m1@x>", event_id=event_id
    )
    return normalise.agentmail(json.dumps(payload), {}, datetime.fromtimestamp(T0 / 1000, UTC))


def _delivery(envelope: Envelope, offset: int, trace_id: str | None) -> Record:
    traced = [("traceparent", f"00-{trace_id}-b7ad6b7169203331-01".encode())] if trace_id else []
    headers = (*envelope.headers(), *traced)
    return Record(0, offset, T0 + offset, envelope.thread_key.encode(), envelope.encode(), headers)


def test_each_deliverys_trace_id_is_shown_once_and_in_the_json() -> None:
    envelope = _envelope("evt-1")
    deliveries = [
        _delivery(envelope, 0, FIRST),
        _delivery(envelope, 1, FIRST),  # the provider retried: same event, same id shown once
        _delivery(_envelope("evt-2"), 2, SECOND),
        _delivery(_envelope("evt-3"), 3, None),  # written with tracing off
    ]

    trace = assemble("<m1@x>", Sources(deliveries=deliveries))

    assert trace is not None
    assert [d.trace_id for d in trace.deliveries] == [FIRST, FIRST, SECOND, None]
    assert f"otel trace {FIRST}, {SECOND}" in render_text(trace)
    data = to_json(trace)
    assert data["trace_ids"] == [FIRST, SECOND]
    assert data["deliveries"][0]["trace_id"] == FIRST


def test_without_a_traced_delivery_no_trace_line_is_printed() -> None:
    trace = assemble("<m1@x>", Sources(deliveries=[_delivery(_envelope("evt-1"), 0, None)]))

    assert trace is not None
    assert "otel trace" not in render_text(trace)

"""A local OTLP/HTTP trace receiver: what a collector's ``otlp`` receiver does on
``POST /v1/traces`` (protobuf, gzip or not), keeping each span as a flat :class:`Span`.

Built on ``opentelemetry-proto``, the protocol's own messages, so a test asserts on the
spans exactly as onceonly's processes exported them over the wire. In a thread
(:meth:`start_in_thread`), or alone: ``python -m testkit.fakes.otlp_receiver --port N``
(``GET /_control/spans`` answers how many it holds, by name; ``GET /healthz``).
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from testkit.fakes._server import FakeServer, command_line

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str  #: "" for a root span
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()  #: the trace ids it links to
    error: bool = False
    duration_ns: int = 0


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return (
        getattr(value, kind)
        if kind in ("string_value", "int_value", "bool_value", "double_value")
        else None
    )


def spans_of(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found: list[Span] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                found.append(
                    Span(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple(link.trace_id.hex() for link in span.links),
                        error=span.status.code == 2,
                        duration_ns=span.end_time_unix_nano - span.start_time_unix_nano,
                    )
                )
    return found


class OtlpReceiver(FakeServer):
    """Keeps every span it is sent; ``spans`` is safe to read from another thread."""

    name = "OTLP receiver"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.requests = 0

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_get("/_control/spans", self._count)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def _count(self, request: web.Request) -> web.Response:
        return web.json_response(dict(Counter(span.name for span in self.spans)))

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        found = spans_of(body)
        with self._lock:
            self._spans.extend(found)
            self.requests += 1
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )


def main(argv: list[str] | None = None) -> None:
    parser = command_line(
        "otlp_receiver", "An OTLP/HTTP trace receiver for tests; prints its base URL on stdout."
    )
    args = parser.parse_args(argv)
    asyncio.run(OtlpReceiver().serve(args.host, args.port))


if __name__ == "__main__":
    main()

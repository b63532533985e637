"""OpenTelemetry behind one seam: the rest of onceonly calls the typed helpers here.

:func:`configure` decides once per process (ingest's ``serve``, the worker's start):

* an application's own ``TracerProvider`` installed (``trace.set_tracer_provider``, or
  ``opentelemetry-instrument``): its spans go there;
* else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) set: the SDK exports
  over OTLP/HTTP (``pip install 'onceonly[otel]'``) with a batch processor;
* else off: every helper returns :data:`OFF`, whose methods do nothing, and no header is
  added to a record. ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` is off.

The spans of one delivery make one trace: ingest's ``onceonly.deliver`` span, whose W3C
context (``traceparent``, ``tracestate``) rides in the record's Kafka headers; then in
the worker ``onceonly.hold`` and ``onceonly.process`` with ``onceonly.dedupe``, the
writer call (``onceonly.write``, renamed ``chat <model>`` with the GenAI attributes when
the writer calls :func:`report_model_call`) and ``onceonly.send`` under it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal, Protocol, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from onceonly.foundation.errors import ConfigError

#: the W3C trace context's Kafka headers, as a record carries them
TRACE_HEADERS = ("traceparent", "tracestate")
#: a delivery's trace context: ``((header, value), ...)``; () when it has none
Carrier = tuple[tuple[str, str], ...]
Mode = Literal["off", "app", "otlp"]
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_INSTRUMENTATION = "onceonly"
_PROTOCOL = "http/protobuf"

_tracer: trace.Tracer | None = None
_propagator: Any = None


class Off:
    """A span that is not recorded: what every helper returns while tracing is off."""

    __slots__ = ()

    def __enter__(self) -> Off:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        return None

    def set(self, name: str, value: str | int | float | bool) -> None:
        return None


OFF = Off()


class Scope(Off):
    """A recorded span, current inside ``with``; an exception marks it as failed."""

    __slots__ = ("_token", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self._token: Any = None

    def __enter__(self) -> Scope:
        self._token = context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if isinstance(exc, BaseException):
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.span.end()
        context.detach(self._token)

    def set(self, name: str, value: str | int | float | bool) -> None:
        self.span.set_attribute(name, value)


class _Writing(Scope):
    """The writer call's span: :func:`report_model_call` adds up what the writer reports."""

    __slots__ = ("_reset", "input_tokens", "output_tokens")

    def __init__(self, span: trace.Span) -> None:
        super().__init__(span)
        self.input_tokens = 0
        self.output_tokens = 0

    def __enter__(self) -> _Writing:
        super().__enter__()
        self._reset = _writing.set(self)
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        _writing.reset(self._reset)
        super().__exit__(kind, exc, tb)


_writing: ContextVar[_Writing | None] = ContextVar("onceonly_writing", default=None)


# -- deciding, once per process ---------------------------------------------------------
def mode(environ: Mapping[str, str], *, app_provider: bool) -> Mode:
    """Which tracing this process gets (the rules are in the module's docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "off"
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return "off"
    if app_provider:
        return "app"
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not (endpoint or "").strip():
        return "off"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip()
        if protocol and protocol != _PROTOCOL:
            raise ConfigError(
                f"{name}={protocol!r}: onceonly exports traces over {_PROTOCOL} only; unset it "
                "and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port "
                "(4318 by default)"
            )
    return "otlp"


def configure(
    service: str,
    *,
    provider: trace.TracerProvider | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Mode:
    """Turn tracing on or off for this process; ``provider``: use that one (tests, apps)."""
    global _tracer, _propagator
    installed = trace.get_tracer_provider()
    app = provider is not None or not isinstance(
        installed, trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )
    chosen = mode(environ, app_provider=app)
    if chosen == "off":
        _tracer = None
        return chosen
    if chosen == "otlp":
        provider = _otlp_provider(service, environ)
        trace.set_tracer_provider(provider)
    from opentelemetry import propagate  # OTEL_PROPAGATORS; W3C trace context by default

    _propagator = propagate.get_global_textmap()
    _tracer = (provider or installed).get_tracer(_INSTRUMENTATION)
    return chosen


def _otlp_provider(service: str, environ: Mapping[str, str]) -> trace.TracerProvider:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK or its OTLP "
            f"exporter is missing ({exc}): pip install 'onceonly[otel]', or unset it"
        ) from exc
    named = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
    sdk = TracerProvider(resource=Resource.create(named))
    sdk.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return sdk


def enabled() -> bool:
    return _tracer is not None


def shutdown() -> None:
    """Flush and stop an SDK provider this module installed (the SDK also does at exit)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if _tracer is not None and callable(flush):
        flush()


# -- the W3C context in Kafka headers -------------------------------------------------
def with_context(headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``headers`` and the current span's W3C context (as they are, when off)."""
    if _tracer is None:
        return headers
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return headers + [(k, v.encode()) for k, v in carrier.items()]


def carrier(headers: Iterable[tuple[str, bytes | None]] | None) -> Carrier:
    """The trace context a record carries, kept with its delivery (() when off)."""
    if _tracer is None or not headers:
        return ()
    return tuple((k, v.decode("ascii", "replace")) for k, v in headers if k in TRACE_HEADERS and v)


def trace_id(headers: Iterable[tuple[str, bytes | None]]) -> str | None:
    """The trace id of a record's ``traceparent`` header, for ``onceonly trace``."""
    for name, value in headers:
        if name == "traceparent" and value:
            found = _TRACEPARENT.fullmatch(value.decode("ascii", "replace").strip())
            if found and found.group(1) != "0" * 32:
                return found.group(1)
    return None


def _parent(of: Carrier) -> Any:
    return _propagator.extract(dict(of)) if of else None


# -- the spans ------------------------------------------------------------------------
def _start(
    name: str,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Any = None,
    links: Sequence[Link] = (),
    /,
    **attributes: str | int,
) -> Any:
    """A started span ``onceonly.<name>`` with ``onceonly.<key>`` attributes (tracing on)."""
    assert _tracer is not None
    span = _tracer.start_span(f"onceonly.{name}", context=context, kind=kind, links=links)
    for key, value in attributes.items():
        span.set_attribute(f"onceonly.{key}", value)
    return span


def delivery(provider: str) -> Off:
    """Ingest: one delivery, from its request to the broker's acknowledgement."""
    return OFF if _tracer is None else Scope(_start("deliver", SpanKind.SERVER, provider=provider))


def stored(event_id: str, event_type: str, topic: str, partition: int, offset: int) -> None:
    """Ingest: what the current delivery span stored, and where (``*Delivered``)."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    span.set_attribute("onceonly.event_id", event_id)
    span.set_attribute("onceonly.event_type", event_type)
    span.set_attribute("messaging.system", "kafka")
    span.set_attribute("messaging.destination.name", topic)
    span.set_attribute("messaging.destination.partition.id", str(partition))
    span.set_attribute("messaging.kafka.offset", offset)


def hold(of: Carrier, event_id: str) -> Off:
    """Worker: a delivery taken into its thread's reorder buffer."""
    if _tracer is None:
        return OFF
    return Scope(_start("hold", SpanKind.CONSUMER, _parent(of), event_id=event_id))


def process(carriers: Sequence[Carrier], thread_key: str) -> Off:
    """Worker: one thread's released deliveries, under the first one's trace; the
    others' traces are linked."""
    if _tracer is None:
        return OFF
    first = next((c for c in carriers if c), ())
    links = [
        Link(trace.get_current_span(_parent(c)).get_span_context())
        for c in carriers
        if c and c is not first
    ]
    span = _start(
        "process",
        SpanKind.CONSUMER,
        _parent(first),
        links,
        thread_key=thread_key,
        deliveries=len(carriers),
    )
    return Scope(span)


class _Traced(Protocol):
    """A delivery as the worker holds it (onceonly.processors.reorder.holds.Delivery)."""

    @property
    def trace(self) -> Carrier: ...

    @property
    def envelope(self) -> Any: ...


Process = TypeVar("Process", bound=Callable[..., Awaitable[Any]])


def processing(method: Process) -> Process:
    """Decorates ``Conversation.process(self, job, deliveries, ...)``: the deliveries'
    ``onceonly.process`` span around it, current for every step it takes."""

    @functools.wraps(method)
    async def traced(self: Any, job: Any, deliveries: Sequence[_Traced], *a: Any, **k: Any) -> Any:
        if _tracer is None or not deliveries:
            return await method(self, job, deliveries, *a, **k)
        with process([d.trace for d in deliveries], deliveries[0].envelope.thread_key):
            return await method(self, job, deliveries, *a, **k)

    return traced  # type: ignore[return-value]


def step(name: str, **attributes: str | int) -> Off:
    """Worker: a step under the current span: ``dedupe`` and the like."""
    return OFF if _tracer is None else Scope(_start(name, **attributes))


def writing(key: str) -> Off:
    """Worker: the writer call for the reply ``key`` (every attempt of it)."""
    return OFF if _tracer is None else _Writing(_start("write", SpanKind.CLIENT, reply_key=key))


def report_model_call(
    *,
    model: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    response_model: str | None = None,
    provider: str = "openai",
) -> None:
    """For a writer: the model call it made, as the GenAI semantic conventions name it.
    Tokens of several calls (retries) add up; nothing happens when tracing is off."""
    scope = _writing.get()
    if scope is None:
        return
    span = scope.span
    span.update_name(f"chat {model}")
    span.set_attribute("gen_ai.operation.name", "chat")
    span.set_attribute("gen_ai.provider.name", provider)
    span.set_attribute("gen_ai.request.model", model)
    if response_model:
        span.set_attribute("gen_ai.response.model", response_model)
    if input_tokens is not None:
        scope.input_tokens += input_tokens
        span.set_attribute("gen_ai.usage.input_tokens", scope.input_tokens)
    if output_tokens is not None:
        scope.output_tokens += output_tokens
        span.set_attribute("gen_ai.usage.output_tokens", scope.output_tokens)


class _Record(Protocol):
    key: str
    channel: str


class Sender(Protocol):
    async def reply(self, record: Any) -> str: ...

    async def find_reply(self, record: Any) -> str | None: ...


S = TypeVar("S", bound=Sender)


class TracedSender:
    """A mail sender whose sends (and look-ups for a sent reply) are spans."""

    def __init__(self, inner: Sender) -> None:
        self.inner = inner

    async def reply(self, record: _Record) -> str:
        with _send_span("send", record) as scope:
            sent = await self.inner.reply(record)
            scope.set("onceonly.sent_message_id", sent)
            return sent

    async def find_reply(self, record: _Record) -> str | None:
        with _send_span("find_reply", record):
            return await self.inner.find_reply(record)


def _send_span(name: str, record: _Record) -> Off:
    if _tracer is None:
        return OFF
    return Scope(_start(name, SpanKind.CLIENT, reply_key=record.key, channel=record.channel))


def traced_sender(inner: S) -> S:
    """``inner``, with a span per send when tracing is on; ``inner`` itself when off."""
    return inner if _tracer is None else TracedSender(inner)  # type: ignore[return-value]

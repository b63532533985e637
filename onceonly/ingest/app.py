"""The aiohttp ingest service: verify, normalise, produce, and only then answer 2xx.

=========  ===================================================================
status     when
=========  ===================================================================
204        the broker acknowledged the record (also for a repeat delivery)
401        any verification failure (headers, signature, tolerance, not UTF-8)
400        a verified body that is not what the provider sends
404        a provider whose secret is not configured
408        the body did not arrive within ``ingest_read_timeout_s`` of its headers
413        a body above ``max_body_bytes``, refused before it is read whole
503        the broker did not acknowledge within ``produce_timeout_ms``; or the
           connection is one past ``ingest_max_connections`` (``onceonly.ingest.limits``)
=========  ===================================================================
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from onceonly.foundation import tracing
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, ProduceFailed
from onceonly.foundation.providers import ALL, NAMES, ROUTES, configured
from onceonly.foundation.settings import Settings
from onceonly.ingest import heap, limits, normalise, verify
from onceonly.ingest.exceptions import PayloadError, VerificationError
from onceonly.ingest.limits import BodyTimeout, BodyTooLarge, BodyUnreadable, ClientDisconnected
from onceonly.ingest.metrics import IngestMetrics
from onceonly.ingest.processes import mark_ready
from onceonly.schemas.envelope import Envelope

log = structlog.get_logger("onceonly.ingest")

Clock = Callable[[], datetime]
VerifyFn = Callable[[bytes, Mapping[str, str]], None]


@dataclass(frozen=True, slots=True)
class Provider:
    """One configured route: how to verify a delivery and how to normalise it."""

    name: str
    verify: VerifyFn
    normalise: normalise.Normaliser


def providers_from_settings(settings: Settings) -> dict[str, Provider]:
    """The providers whose secret is set (:func:`onceonly.foundation.providers.configured`);
    the others answer 404.

    A secret that could never verify anything (empty, not base64 for Svix and Standard
    Webhooks) is a ConfigError here, at start-up, rather than a failure per request.
    """
    out: dict[str, Provider] = {}
    for name, (route, secret) in configured(settings).items():
        verify.check_secret(route.verifier, secret)
        check: Callable[..., None] = verify.VERIFIERS[route.verifier]
        fn = partial(check, secret=secret, **route.options(settings))
        out[name] = Provider(name, fn, normalise.for_route(name))
    return out


ALL_PROVIDERS = ALL
#: route names that label metrics as themselves, configured or not; any other is "unknown"
KNOWN_PROVIDERS = frozenset(NAMES)
#: a provider name that is a path as it stands (``standard/<source>`` included): no
#: character that the router would quote, decode or read as a pattern
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~-]+(/[A-Za-z0-9_.~-]+)?")


class Ingest:
    """The request handlers, bound to one producer and one set of providers."""

    def __init__(
        self,
        settings: Settings,
        producer: AsyncProducer,
        admin: Admin,
        *,
        providers: Mapping[str, Provider] | None = None,
        metrics: IngestMetrics | None = None,
        clock: Clock = lambda: datetime.now(UTC),
        shared_metrics: Path | None = None,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.admin = admin
        self.providers = dict(providers_from_settings(settings) if providers is None else providers)
        #: one of several processes writes its metrics at once, for the others to read
        self.metrics = metrics or IngestMetrics(
            providers=tuple(self.providers), deferred=shared_metrics is None
        )
        self.clock = clock
        self.mac_key = settings.envelope_mac_key
        self.log_stored = log.is_enabled_for(logging.DEBUG)
        #: prometheus_client's multiprocess files of all ingest processes, summed by /metrics
        self.shared_metrics = shared_metrics

    # -- routes -------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        # each configured provider on a path of its own, matched before the patterns: a
        # plain path is one dictionary look-up in aiohttp's router, a pattern a regex each
        for name in self.providers:
            if _PLAIN_NAME.fullmatch(name):
                app.router.add_post(f"/webhooks/{name}", self._route(name))
        app.router.add_post("/webhooks/standard/{source}", self.standard)
        app.router.add_post("/webhooks/{provider}", self.webhook)
        app.router.add_get("/webhooks/nylas", self.nylas_challenge)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.prometheus)
        return app

    def _route(self, name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """The handler of provider ``name``'s own path."""

        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._deliver(request, name)

        return handler

    async def webhook(self, request: web.Request) -> web.StreamResponse:
        return await self._deliver(request, request.match_info["provider"])

    async def standard(self, request: web.Request) -> web.StreamResponse:
        return await self._deliver(request, "standard/" + request.match_info["source"])

    async def nylas_challenge(self, request: web.Request) -> web.StreamResponse:
        """Nylas checks a new webhook URL with GET ?challenge=X and expects X back."""
        if "nylas" not in self.providers:
            return _error(404, "not_configured", "Nylas is not configured on this ingest")
        challenge = request.query.get("challenge")
        if challenge is None:
            return _error(400, "no_challenge", "GET /webhooks/nylas needs ?challenge=")
        return web.Response(text=challenge, content_type="text/plain")

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        # the pid: which of several ingest processes answered (ONCEONLY_INGEST_PROCESSES)
        return web.json_response({"status": "ok", "process": os.getpid()})

    async def readyz(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        ok = await loop.run_in_executor(None, self.admin.ping, 2.0)
        if not ok:
            return web.json_response({"status": "broker unreachable"}, status=503)
        return web.json_response({"status": "ready"})

    async def prometheus(self, request: web.Request) -> web.StreamResponse:
        registry = self.metrics.registry
        if self.shared_metrics is not None:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=str(self.shared_metrics))  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- the delivery path ------------------------------------------------------
    async def _deliver(self, request: web.Request, name: str) -> web.StreamResponse:
        """One delivery, in its span when tracing is on (onceonly.foundation.tracing)."""
        with tracing.delivery(name) as span:
            response = await self._receive(request, name)
            span.set("http.response.status_code", response.status)
            return response

    async def _receive(self, request: web.Request, name: str) -> web.StreamResponse:
        started = time.perf_counter()
        provider = self.providers.get(name)
        if provider is None:
            # one label for every name no provider has: a scan never grows /metrics
            label = name if name in KNOWN_PROVIDERS else "unknown"  # configured ones never get here
            self.metrics.rejected.labels(label, "not_configured").inc()
            return _error(404, "not_configured", f"no webhook secret is configured for {name!r}")
        try:
            body = await limits.read_body(
                request,
                limit=self.settings.max_body_bytes,
                timeout_s=self.settings.ingest_read_timeout_s,
            )
            provider.verify(body, request.headers)
            envelope = provider.normalise(body.decode("utf-8"), request.headers, self.clock())
            record = _record(envelope, self.mac_key)
        except VerificationError as exc:
            return self._reject(name, 401, exc.check, str(exc), request)
        except PayloadError as exc:
            return self._reject(name, 400, exc.check, str(exc), request)
        except BodyTooLarge as exc:
            return self._reject(name, 413, exc.check, str(exc), request)
        except BodyUnreadable as exc:
            return self._reject(name, 400, exc.check, str(exc), request)
        except BodyTimeout as exc:
            return self._reject(name, 408, exc.check, str(exc), request)
        except ClientDisconnected as exc:
            return self._abandoned(name, exc, request)
        return await self._store(name, envelope, record, request, started)

    async def _store(
        self, name: str, envelope: Envelope, record: _Record, request: web.Request, started: float
    ) -> web.StreamResponse:
        """Produce the record; 204 once the broker acknowledged it, 503 if it did not in time."""
        try:  # the producer fails a record not acknowledged within its timeout
            delivered = await self.producer.produce(
                self.settings.deliveries_topic, record.value, key=record.key, headers=record.headers
            )
        except ProduceFailed as exc:
            self.metrics.rejected.labels(name, "broker_unavailable").inc()
            log.warning(
                "delivery not stored; answering 503 so the sender retries",
                provider=name,
                event_id=envelope.event_id,
                error=str(exc) or "no broker acknowledgement within the timeout",
                **_delivery_header(name, request),
            )
            return _error(
                503,
                "broker_unavailable",
                "the delivery could not be stored; retry later",
                headers={"Retry-After": "5"},
            )
        self.metrics.stored(name, time.perf_counter() - started)
        tracing.stored(envelope.event_id, envelope.event_type, *delivered)
        if self.log_stored:  # its fields cost more than the line saves, unless it is shown
            log.debug(
                "delivery stored",
                provider=name,
                event_id=envelope.event_id,
                event_type=envelope.event_type,
                partition=delivered.partition,
                offset=delivered.offset,
                **_delivery_header(name, request),
            )
        return web.Response(status=204)

    def _reject(
        self, name: str, status: int, check: str, message: str, request: web.Request
    ) -> web.Response:
        self.metrics.rejected.labels(name, check).inc()
        log.info(
            "delivery rejected",
            provider=name,
            status=status,
            reason=check,
            detail=message,
            **_delivery_header(name, request),
        )
        return _error(status, check, message)

    def _abandoned(self, name: str, exc: ClientDisconnected, request: web.Request) -> web.Response:
        """Counted and logged in one line; aiohttp drops the answer, nobody is there to read it."""
        self.metrics.rejected.labels(name, exc.check).inc()
        log.info(
            "delivery abandoned: the client disconnected mid-body",
            provider=name,
            reason=exc.check,
            detail=str(exc),
            **_delivery_header(name, request),
        )
        return _error(400, exc.check, str(exc))

    def refused(self) -> None:
        """A connection past ``ingest_max_connections``: counted before any route is known."""
        self.metrics.rejected.labels("unknown", "too_many_connections").inc()


@dataclass(frozen=True, slots=True)
class _Record:
    value: bytes
    key: bytes
    headers: list[tuple[str, bytes]]


def _record(envelope: Envelope, mac_key: bytes | None = None) -> _Record:
    """The Kafka record, built before producing: text that cannot be encoded is a 400.
    With ``mac_key`` (ONCEONLY_ENVELOPE_SECRET) its headers carry the value's MAC, and
    with tracing on, the current span's context."""
    try:
        value = envelope.encode()
        headers = tracing.with_context(envelope.headers(mac_key, value))  # W3C trace context
        return _Record(value, envelope.thread_key.encode(), headers)
    except UnicodeEncodeError as exc:
        raise PayloadError(
            "bad_shape", f"an id, type or header holds text that is not valid Unicode: {exc.reason}"
        ) from exc


def _delivery_header(name: str, request: web.Request) -> dict[str, str]:
    """GitHub's delivery id, for the log only (it is not signed: never the event id).

    Escaped and cut short: a client can put anything there.
    """
    if name != "github":
        return {}
    value = request.headers.get("X-GitHub-Delivery")
    if value is None:
        return {}
    return {"github_delivery": value[:64].encode("ascii", "backslashreplace").decode("ascii")}


def _error(
    status: int, check: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response({"error": message, "check": check}, status=status, headers=headers)


async def serve(
    settings: Settings,
    *,
    ready: Callable[[str], None] | None = None,
    one_of: Path | None = None,
) -> None:
    """Run ingest until cancelled: one producer, one admin client, one aiohttp site.

    ``one_of``: this process is one of ``ONCEONLY_INGEST_PROCESSES`` (onceonly.ingest.processes),
    whose parent keeps its state there: it shares the port and the metrics."""
    tracing.configure("onceonly-ingest")
    connection = Connection.from_settings(settings)
    producer = AsyncProducer(connection)
    shared = one_of / "metrics" if one_of is not None else None
    admin = Admin(connection)
    ingest = Ingest(settings, producer, admin, shared_metrics=shared)
    for route in ROUTES:
        if route.name not in ingest.providers:
            log.warning(
                "provider not configured: its route answers 404",
                provider=route.name,
                variable=route.variable,
            )
    runner = limits.app_runner(ingest.app(), settings)
    await runner.setup()
    heap.settle()  # everything start-up made is frozen, out of the collector's walks
    listener = await limits.listen(
        runner,
        settings.ingest_host,
        settings.ingest_port,
        max_connections=settings.ingest_max_connections,
        on_refused=ingest.refused,
        reuse_port=one_of is not None,
    )
    port = listener.sockets[0].getsockname()[1]  # the one bound, when the setting is 0
    url = f"http://{settings.ingest_host}:{port}"
    log.info("ingest listening", url=url, providers=sorted(ingest.providers), pid=os.getpid())
    if one_of is not None:
        mark_ready(one_of)
    if ready is not None:
        ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        listener.close()
        await runner.cleanup()
        await asyncio.get_running_loop().run_in_executor(None, producer.close)

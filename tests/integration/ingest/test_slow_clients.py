"""Slow, idle, numerous and vanishing clients against ingest as ``onceonly.ingest.app.serve`` runs
it.

Each test starts ``serve`` itself (port 0, all five providers, fresh topics, small limits)
on the test's event loop and talks to it over raw sockets on loopback, so the timers,
the connection cap and the body read are aiohttp's and ingest's own, not a test server's.
Every wait is bounded: a limit that does not hold fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

import onceonly.ingest.app
from onceonly.foundation.settings import Settings
from testkit import payloads, signing
from tests.integration.ingest.hostile_live import Answer

pytestmark = pytest.mark.integration

#: slack on every timer: a loaded 2-core machine, the event loop's own granularity
MARGIN_S = 3.0


async def read_answer(reader: asyncio.StreamReader) -> Answer | None:
    """One HTTP/1.1 answer read by its Content-Length; None if the server closed first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in filter(None, lines):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return Answer(int(status_line.split(" ")[1]), headers, body)


async def closed_within(reader: asyncio.StreamReader, timeout_s: float) -> float | None:
    """Seconds until the server closes the connection, or None if it is open after timeout_s."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(4096):  # anything before the end is read and dropped
                pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - started


def head(method: str, path: str, headers: dict[str, str], *, length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Served:
    """``onceonly.ingest.app.serve`` running on this loop, at the port it bound."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(
            onceonly.ingest.app.serve(settings, ready=self.ready.set_result)
        )
        self.port = 0

    async def start(self) -> Served:
        url = await asyncio.wait_for(asyncio.shield(self.ready), 30)
        self.port = int(url.rsplit(":", 1)[1])
        return self

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """A connection for the ``async with`` block, closed on the way out."""
        reader, writer = await self.connect()
        try:
            yield reader, writer
        finally:
            writer.close()

    async def get(self, path: str) -> Answer:
        async with self.connection() as (reader, writer):
            writer.write(head("GET", path, {"Connection": "close"}))
            answer = await asyncio.wait_for(read_answer(reader), 10)
        assert answer is not None, path
        return answer

    async def rejected(self) -> Counter[tuple[str, str]]:
        """onceonly_deliveries_rejected_total by (provider, reason), from /metrics."""
        answer = await self.get("/metrics")
        counts: Counter[tuple[str, str]] = Counter()
        for family in text_string_to_metric_families(answer.body.decode()):
            for sample in family.samples:
                if sample.name == "onceonly_deliveries_rejected_total":
                    counts[(sample.labels["provider"], sample.labels["reason"])] += int(
                        sample.value
                    )
        return +counts

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self.task, 15)


@pytest.fixture
async def serve_ingest(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    started: list[Served] = []

    async def make(**overrides: Any) -> Served:
        values = {**signing.provider_secrets(), "ingest_port": 0, **overrides}
        served = Served(topics_factory(settings_factory(**values)))
        started.append(served)
        return await served.start()

    yield make
    for served in started:
        await served.stop()
    # the cancelled tasks' tracebacks hold serve's frames, and its Kafka clients with them
    started.clear()
    gc.collect()


def _trickled(writer: asyncio.StreamWriter, byte: bytes, until: float) -> asyncio.Task[None]:
    """Writes ``byte`` every 0.1 s till the monotonic time ``until`` or a broken connection."""

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            while time.monotonic() < until:
                writer.write(byte)
                await writer.drain()
                await asyncio.sleep(0.1)

    return asyncio.create_task(trickle())


async def _healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Answer:
    """GET /healthz on the connection (HTTP/1.1: kept alive by default); its 200 answer."""
    writer.write(head("GET", "/healthz", {}))
    answer = await asyncio.wait_for(read_answer(reader), 10)
    assert answer is not None
    assert answer.status == 200
    return answer


async def test_a_body_trickled_after_its_headers_gets_408_within_the_read_timeout(
    serve_ingest: Callable[..., Awaitable[Served]],
) -> None:
    read_timeout = 1.0
    served = await serve_ingest(ingest_read_timeout_s=read_timeout, ingest_keepalive_s=30)
    async with served.connection() as (reader, writer):
        writer.write(head("POST", "/webhooks/nylas", signing.nylas_headers(b"{}"), length=2097152))
        started = time.monotonic()
        trickling = _trickled(writer, b" ", started + read_timeout + MARGIN_S)  # never the 2 MiB
        try:
            answer = await asyncio.wait_for(read_answer(reader), read_timeout + MARGIN_S)
        except TimeoutError:
            answer = None
        finally:
            trickling.cancel()
    elapsed = time.monotonic() - started

    assert answer is not None, f"no answer to a trickled body within {read_timeout + MARGIN_S} s"
    assert (answer.status, answer.error()["check"]) == (408, "body_timeout")
    assert read_timeout * 0.9 <= elapsed < read_timeout + MARGIN_S
    assert await served.rejected() == Counter({("nylas", "body_timeout"): 1})


#: the keep-alive setting of :func:`kept_alive`
KEEPALIVE_S = 1.0


@pytest.fixture
async def kept_alive(serve_ingest: Callable[..., Awaitable[Served]]) -> Served:
    """ingest served with a keep-alive of KEEPALIVE_S."""
    return await serve_ingest(ingest_keepalive_s=KEEPALIVE_S)


async def test_an_idle_kept_alive_connection_is_closed_after_the_keepalive_setting(
    kept_alive: Served,
) -> None:
    async with kept_alive.connection() as (reader, writer):
        answer = await _healthz(reader, writer)
        assert "close" not in answer.headers.get("connection", "")

        closed_after = await closed_within(reader, KEEPALIVE_S + MARGIN_S)

    assert closed_after is not None, "an idle connection outlived the keep-alive setting"
    assert KEEPALIVE_S * 0.9 <= closed_after < KEEPALIVE_S + MARGIN_S


async def test_headers_trickled_without_end_are_cut_off_by_the_keepalive_timer(
    kept_alive: Served,
) -> None:
    async with kept_alive.connection() as (reader, writer):
        writer.write(b"POST /webhooks/nylas HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # one header, never its end
        trickling = _trickled(writer, b"x", time.monotonic() + KEEPALIVE_S + MARGIN_S)
        try:
            closed_after = await closed_within(reader, KEEPALIVE_S + MARGIN_S)
        finally:
            trickling.cancel()

    assert closed_after is not None, "a client trickling headers kept its connection"
    assert closed_after < KEEPALIVE_S + MARGIN_S


async def test_a_connection_past_the_cap_gets_503_and_the_cap_frees_as_others_close(
    serve_ingest: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve_ingest(ingest_max_connections=2, ingest_keepalive_s=30)
    held = [await served.connect() for _ in range(2)]
    for reader, writer in held:  # one request each: both are surely open on the server
        await _healthz(reader, writer)

    async with served.connection() as (reader, _):
        refused = await asyncio.wait_for(read_answer(reader), 10)
        closed = await closed_within(reader, MARGIN_S)
    assert refused is not None, "a connection past the cap got no answer"
    assert (refused.status, refused.error()["check"]) == (503, "too_many_connections")
    assert refused.headers["retry-after"] == "5"
    assert closed is not None, "a refused connection was left open"

    for _, other in held:
        other.close()
    answer = None
    for _ in range(50):  # the server notices the closes within a few turns of its loop
        with contextlib.suppress(AssertionError):
            answer = await served.get("/healthz")
        if answer is not None and answer.status == 200:
            break
        await asyncio.sleep(0.1)
    assert answer is not None
    assert answer.status == 200, "the cap did not free as connections closed"
    rejected = await served.rejected()
    assert rejected[("unknown", "too_many_connections")] >= 1
    assert set(rejected) == {("unknown", "too_many_connections")}


async def test_a_signed_delivery_is_still_accepted_through_the_limits(
    serve_ingest: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve_ingest(ingest_max_connections=4, ingest_read_timeout_s=5)
    body = payloads.dumps(payloads.nylas_message())
    async with served.connection() as (reader, writer):
        writer.write(head("POST", "/webhooks/nylas", signing.nylas_headers(body), length=len(body)))
        for start in range(0, len(body), 100):  # a body in pieces, well within the timeout
            writer.write(body[start : start + 100])
            await writer.drain()
            await asyncio.sleep(0.001)
        answer = await asyncio.wait_for(read_answer(reader), 15)

    assert answer is not None
    assert answer.status == 204
    assert await served.rejected() == Counter()


async def test_a_client_that_drops_mid_body_is_counted_and_logged_once_without_traceback(
    serve_ingest: Callable[..., Awaitable[Served]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)  # aiohttp's and asyncio's own loggers (stdlib)
    served = await serve_ingest()
    body = payloads.dumps(payloads.nylas_message())
    with structlog.testing.capture_logs() as logged:
        # a fresh proxy: the module's own may be cached on an earlier configuration
        monkeypatch.setattr(onceonly.ingest.app, "log", structlog.get_logger("onceonly.ingest"))
        _, writer = await served.connect()
        writer.write(head("POST", "/webhooks/nylas", signing.nylas_headers(body), length=len(body)))
        writer.write(body[: len(body) // 2])
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is reading the body
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

        rejected: Counter[tuple[str, str]] = Counter()
        for _ in range(50):  # the server sees the close within a few turns of its loop
            rejected = await served.rejected()
            if rejected:
                break
            await asyncio.sleep(0.1)

    assert rejected == Counter({("nylas", "client_disconnected"): 1})
    abandoned = [e for e in logged if e.get("reason") == "client_disconnected"]
    assert len(abandoned) == 1, logged
    assert abandoned[0]["log_level"] == "info"
    assert "exc_info" not in abandoned[0]
    assert not [e for e in logged if e["log_level"] in ("error", "critical", "exception")]
    assert "Traceback" not in caplog.text
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]

"""The hostile-input suite's live ingest: a real port, raw sockets, answers read by hand."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client.parser import text_string_to_metric_families

from onceonly.foundation.kafka import Admin, AsyncProducer, Connection
from onceonly.foundation.settings import Settings
from onceonly.ingest.app import Ingest
from testkit import signing
from tests.conftest import consume_all

OPENAPI = Path(__file__).resolve().parents[3] / "ops" / "openapi.yaml"

#: The body limit of the property test: small, so oversize examples stay cheap.
MAX_BODY = 8192

ROUTES = {
    "agentmail": "/webhooks/agentmail",
    "nylas": "/webhooks/nylas",
    "stripe": "/webhooks/stripe",
    "github": "/webhooks/github",
    "standard": "/webhooks/standard/crm",
}
POST_STATUSES = {204, 400, 401, 404, 413, 503}
VERIFICATION_CHECKS = {
    "missing_header",
    "malformed_header",
    "bad_signature",
    "timestamp_out_of_tolerance",
    "body_not_utf8",
}
PAYLOAD_CHECKS = {"not_json", "no_event_id", "bad_shape"}

SECRETS = (
    signing.SVIX_SECRET,
    signing.SVIX_SECRET.removeprefix("whsec_"),
    signing.STANDARD_SECRET,
    signing.STANDARD_SECRET.removeprefix("whsec_"),
    signing.STRIPE_SECRET,
    signing.STRIPE_SECRET.removeprefix("whsec_"),
    signing.NYLAS_SECRET,
    signing.GITHUB_SECRET,
)

T = TypeVar("T")


def _secrets() -> dict[str, Any]:
    return signing.provider_secrets()


# -- a live ingest on a real port ---------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()

    def error(self) -> dict[str, Any]:
        """The JSON error body every non-2xx answer of a webhook route carries."""
        assert self.content_type == "application/json", (self.status, self.headers, self.body)
        data = json.loads(self.body)
        assert isinstance(data, dict)
        assert set(data) == {"error", "check"}, data
        assert isinstance(data["error"], str)
        assert isinstance(data["check"], str)
        assert data["error"]
        assert data["check"]
        return data


class LiveIngest:
    """An ingest app on 127.0.0.1:<free port>, served by an event loop on its own thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ingest", daemon=True)
        self.thread.start()
        self.producer = AsyncProducer(Connection.from_settings(settings))
        self.ingest = Ingest(settings, self.producer, Admin(Connection.from_settings(settings)))
        # as onceonly.ingest.app.serve runs it: no access log
        self.runner = web.AppRunner(self.ingest.app(), access_log=None, handle_signals=False)
        self.port = self.run(self._start())
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self) -> int:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        # a connection per request: no race with a server closing a kept-alive one
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        return int(self.runner.addresses[0][1])

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        async def stop() -> None:
            await self.session.close()
            await self.runner.cleanup()
            # connections still lingering over an unread body
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.producer.close(timeout_s=5)
        self.loop.close()

    # -- clients ----------------------------------------------------------------------
    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: list[tuple[str, str]] = (),  # type: ignore[assignment]
        body: bytes = b"",
        chunk_size: int | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        """Through aiohttp's client: header values go out UTF-8 encoded."""
        data: Any = body
        if chunk_size is not None:
            data = _chunks(body, chunk_size)
        async with self.session.request(
            method,
            self.url + path,
            headers=CIMultiDict(headers),
            data=data if method == "POST" else None,
            params=params,
        ) as response:
            return Answer(
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                await response.read(),
            )

    async def raw(self, data: bytes, *, timeout_s: float = 10.0) -> Answer | None:
        """Send bytes as they are; the answer, or None if the server closed without one."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            with contextlib.suppress(ConnectionError):
                writer.write(data)
                await writer.drain()
            return await asyncio.wait_for(read_answer(reader), timeout_s)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        return self.run(self.request("POST", path, headers=list(headers.items()), body=body))

    def get(self, path: str) -> Answer:
        return self.run(self.request("GET", path))

    # -- what it recorded ---------------------------------------------------------------
    def records(self) -> list[Any]:
        return consume_all(self.settings, self.settings.deliveries_topic)

    def counters(self) -> tuple[Counter[str], Counter[tuple[str, str]]]:
        """(accepted by provider, rejected by (provider, reason)) parsed from /metrics."""
        answer = self.get("/metrics")
        assert answer.status == 200
        assert answer.content_type == "text/plain"
        accepted: Counter[str] = Counter()
        rejected: Counter[tuple[str, str]] = Counter()
        for family in text_string_to_metric_families(answer.body.decode()):
            for sample in family.samples:
                if sample.name == "onceonly_deliveries_accepted_total":
                    accepted[sample.labels["provider"]] += int(sample.value)
                elif sample.name == "onceonly_deliveries_rejected_total":
                    key = (sample.labels["provider"], sample.labels["reason"])
                    rejected[key] += int(sample.value)
        return +accepted, +rejected


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def read_answer(reader: asyncio.StreamReader) -> Answer | None:
    """One HTTP/1.1 answer (interim 1xx skipped), read by its Content-Length."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ")[1])
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:
            continue
        length = int(headers.get("content-length", "0"))
        try:
            body = await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return Answer(status, headers, body)


def http_request(
    method: str,
    path: str,
    headers: list[tuple[str, str | bytes]],
    body: bytes = b"",
    *,
    chunk_size: int | None = None,
) -> bytes:
    """Raw HTTP/1.1 bytes; str header values are latin-1 encoded, as http.client does."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    for name, value in headers:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        lines.append(name.encode("latin-1") + b": " + raw)
    if chunk_size is None:
        lines.append(b"Content-Length: %d" % len(body))
        payload = body
    else:
        lines.append(b"Transfer-Encoding: chunked")
        parts = [
            b"%x\r\n%s\r\n" % (len(body[i : i + chunk_size]), body[i : i + chunk_size])
            for i in range(0, len(body), chunk_size)
        ]
        payload = b"".join(parts) + b"0\r\n\r\n"
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload

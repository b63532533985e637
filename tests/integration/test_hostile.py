"""Hostile input against ingest on the real broker.

What the README promises, tried with input nobody should send: nothing a client can
send produces a 5xx, nothing unverified reaches Kafka, every rejection is counted by
reason on ``/metrics``, secrets never appear in logs or answers, the timestamp tolerance
holds, and the body limit is enforced before a body is read whole.

Each test runs ingest on a real TCP port (``LiveIngest``: an aiohttp ``AppRunner`` on an
event loop of its own thread, configured like ``ingest.app.serve``) with all five
providers configured and fresh topics, and drives it from the test's thread: the
Hypothesis examples and Schemathesis cases of one test share one app, so the counters
and the deliveries topic can be compared with everything sent once they have all run.

Requests go out through two transports: aiohttp's client (header values sent as UTF-8,
as aiohttp does) and a raw socket that encodes header values as latin-1, as
``http.client`` and ``requests`` do, so bytes 0x80-0xff reach the server as they would
from those clients. Framing the HTTP parser itself refuses (a NUL in a header, a
duplicate Content-Length...) never reaches ingest and is tried separately, with raw
bytes.

Tests named ``test_bug_*`` pin bugs this suite found; they fail until ingest is fixed.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import gzip
import hashlib
import hmac
import inspect
import io
import json
import logging
import re
import string
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import standardwebhooks.webhooks
import stripe
import structlog
import svix.webhooks
from aiohttp import web
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

import ingest.app
from foundation.kafka import Admin, AsyncProducer, producer_config_from
from foundation.logs import configure_logging
from foundation.settings import Settings
from ingest import verify
from ingest.app import KNOWN_PROVIDERS, Ingest
from testkit import payloads, signing
from tests.conftest import consume_all

pytestmark = pytest.mark.integration

OPENAPI = Path(__file__).resolve().parents[2] / "ops" / "openapi.yaml"

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
    return {
        "agentmail_webhook_secret": SecretStr(signing.SVIX_SECRET),
        "nylas_webhook_secret": SecretStr(signing.NYLAS_SECRET),
        "stripe_webhook_secret": SecretStr(signing.STRIPE_SECRET),
        "github_webhook_secret": SecretStr(signing.GITHUB_SECRET),
        "standard_webhook_secrets": {"crm": SecretStr(signing.STANDARD_SECRET)},
    }


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
        self.producer = AsyncProducer(producer_config_from(settings))
        self.ingest = Ingest(settings, self.producer, Admin(settings.kafka_bootstrap))
        # as ingest.app.serve runs it: no access log
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
        return consume_all(self.settings.kafka_bootstrap, self.settings.deliveries_topic)

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


@pytest.fixture
def live_ingest(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
) -> Iterator[Callable[..., LiveIngest]]:
    """Ingest apps on real ports, all five providers configured, fresh topics each."""
    made: list[LiveIngest] = []

    def make(**overrides: Any) -> LiveIngest:
        settings = topics_factory(settings_factory(**{**_secrets(), **overrides}))
        live = LiveIngest(settings)
        made.append(live)
        return live

    yield make
    for live in made:
        live.close()


# -- signing, as the providers do -------------------------------------------------------


def sign(
    provider: str, body: bytes, *, at: float, msg_id: str, wrong_secret: bool = False
) -> list[tuple[str, str]]:
    """The verification headers of ``body`` with the providers' own signing code."""
    text = body.decode("utf-8", "replace")  # a non-UTF-8 body is refused before any HMAC
    moment = datetime.fromtimestamp(at, UTC)
    other = "whsec_" + base64.b64encode(b"not-the-configured-secret!").decode()
    if provider == "agentmail":
        webhook = svix.webhooks.Webhook(other if wrong_secret else signing.SVIX_SECRET)
        signature = webhook.sign(msg_id, moment, text)
        return [
            ("svix-id", msg_id),
            ("svix-timestamp", str(int(at))),
            ("svix-signature", signature),
        ]
    if provider == "standard":
        std = standardwebhooks.webhooks.Webhook(other if wrong_secret else signing.STANDARD_SECRET)
        signature = std.sign(msg_id, moment, text)
        return [
            ("webhook-id", msg_id),
            ("webhook-timestamp", str(int(at))),
            ("webhook-signature", signature),
        ]
    if provider == "stripe":
        secret = other if wrong_secret else signing.STRIPE_SECRET
        header = stripe.WebhookSignature.generate_signature_header(text, secret, timestamp=int(at))
        return [("Stripe-Signature", header)]
    secret = "not-the-secret" if wrong_secret else signing.NYLAS_SECRET
    if provider == "github":
        secret = "not-the-secret" if wrong_secret else signing.GITHUB_SECRET
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if provider == "github":
        return [("X-Hub-Signature-256", f"sha256={digest}")]
    return [("X-Nylas-Signature", digest)]


SIGNATURE_HEADERS = {
    "agentmail": ("svix-id", "svix-timestamp", "svix-signature"),
    "standard": ("webhook-id", "webhook-timestamp", "webhook-signature"),
    "stripe": ("Stripe-Signature",),
    "nylas": ("X-Nylas-Signature",),
    "github": ("X-Hub-Signature-256",),
}


# -- strategies ---------------------------------------------------------------------------

TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
#: Headers that change the framing, the route or the connection, and those aiohttp's parser
#: refuses twice (its SINGLETON_HEADERS): tried with raw bytes only.
FRAMING = {
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "host",
    "connection",
    "expect",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "content-location",
    "content-range",
    "content-type",
    "etag",
    "max-forwards",
    "server",
    "user-agent",
}


def header_text(*, latin1: bool, max_size: int = 60) -> st.SearchStrategy[str]:
    """What an HTTP client sends as a header value: no CR, LF or other C0 control.

    C1 controls (0x80-0x9f) and the rest of 0xa0-0xff are obs-text on the wire.
    """
    visible = st.characters(
        max_codepoint=0xFF if latin1 else 0x10FFFF, exclude_categories=("Cc", "Cs")
    )
    extra = st.sampled_from("\t") | st.characters(min_codepoint=0x80, max_codepoint=0x9F)
    return st.text(alphabet=visible | extra, max_size=max_size)


def _b64(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(lambda b: base64.b64encode(b).decode())


def _hex(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(bytes.hex)


def timestamps() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(10**30), 10**30).map(str),
        st.floats().map(str),
        st.sampled_from(
            ["", "0", "-0", "nan", "inf", "1e99", "0x10", "\u0661\u0662", "\uff11\uff12"]
        ),
        st.integers(-(10**9), 10**9).map(lambda d: str(int(time.time()) + d)),
    )


def garbage_for(header: str, *, latin1: bool) -> st.SearchStrategy[str]:
    """Values shaped like the header's format, and values that are not."""
    text = header_text(latin1=latin1)
    name = header.lower()
    if name.endswith("-timestamp"):
        shaped = timestamps()
    elif name.endswith("-signature") and name != "x-nylas-signature":
        entry = st.tuples(st.sampled_from(["v1", "v1a", "v2", "", "V1"]), _b64(32) | text)
        shaped = st.one_of(
            st.lists(entry, min_size=1, max_size=3).map(
                lambda es: " ".join(f"{v},{s}" for v, s in es)
            ),
            text.map(lambda t: "v1" + t),  # a signature entry with no comma
            st.lists(entry, max_size=3).map(lambda es: "  ".join(f"{v},{s}" for v, s in es)),
        )
    elif name == "stripe-signature":
        item = st.tuples(st.sampled_from(["t", "v1", "v0", "", "T", "t "]), text | _hex(32))
        shaped = st.lists(item, max_size=4).map(lambda xs: ",".join(f"{k}={v}" for k, v in xs))
        shaped = shaped | st.builds(lambda t, v: f"t={t},v1={v}", timestamps(), _hex(32) | text)
    elif name in ("x-nylas-signature", "x-hub-signature-256"):
        hexes = _hex(32) | _hex(31) | st.text(alphabet="0123456789abcdefABCDEF", max_size=70)
        prefixed = st.builds(
            lambda p, h: p + h, st.sampled_from(["sha256=", "sha1=", "=", ""]), hexes
        )
        shaped = prefixed | st.builds(lambda h: h.upper(), _hex(32))
    else:
        shaped = text
    if latin1:  # what http.client can send; the UTF-8 transport sends any of them
        shaped = shaped.filter(_latin1)
    return shaped | text


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


#: JSON texts that have broken parsers and normalisers before.
HOSTILE_JSON = [
    '"\\ud800"',
    '"\\udcff\\ud800x"',
    '"\\u0000"',
    '""',
    '" "',
    "null",
    "true",
    "0",
    "-1",
    "1" + "0" * 400,
    "-" + "9" * 400,
    "1" * 4301,
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "1.5",
    "[]",
    "{}",
    "[" * 1500 + "]" * 1500,
    '{"a":' * 700 + "1" + "}" * 700,
    '"2026-13-45T99:99:99Z"',
    '"9999-12-31T23:59:59+14:00"',
    '"\\n\\r\\t\\"\\\\"',
    '"' + "\u2603" * 50 + '"',
    '"' + "x" * 2000 + '"',
]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_json = st.sampled_from(HOSTILE_JSON) | json_values.map(json.dumps)

#: The fields each normaliser reads, with sane JSON values.
TEMPLATES: dict[str, dict[str, Any]] = {
    "agentmail": {
        "type": '"event"',
        "event_type": '"message.received"',
        "event_id": '"evt_1"',
        "message": {
            "inbox_id": '"support@agentmail.to"',
            "thread_id": '"thr_1"',
            "message_id": '"<m1@example.com>"',
            "timestamp": '"2026-11-29T10:00:00.000Z"',
            "text": '"Can you move our meeting?"',
        },
    },
    "nylas": {
        "id": '"notif-1"',
        "type": '"message.created"',
        "time": "1737500935555",
        "data": {
            "object": {
                "id": '"msg-1"',
                "thread_id": '"thread-1"',
                "grant_id": '"grant-1"',
                "object": '"message"',
            }
        },
    },
    "stripe": {
        "id": '"evt_1"',
        "type": '"invoice.paid"',
        "created": "1764410000",
        "account": '"acct_1"',
        "data": {"object": {"id": '"in_1"', "invoice": '"in_1"'}},
    },
    "github": {
        "action": '"opened"',
        "issue": {"number": "7"},
        "pull_request": {"number": "8"},
        "repository": {"full_name": '"acme/widgets"'},
        "installation": {"id": "42"},
    },
    "standard": {
        "type": '"case.updated"',
        "timestamp": '"2026-11-29T10:00:00Z"',
        "data": {"id": '"obj-1"', "thread_id": '"case-9"'},
    },
}


def _render(draw: st.DrawFn, node: dict[str, Any] | str) -> str:
    """The template as JSON text, each value kept, replaced by hostile JSON, or left out."""
    if isinstance(node, str):
        keep = draw(st.sampled_from([True, True, False]))
        return node if keep else draw(hostile_json)
    items = []
    for key, value in node.items():
        choice = draw(st.sampled_from(["keep", "keep", "keep", "hostile", "omit"]))
        if choice == "omit":
            continue
        text = draw(hostile_json) if choice == "hostile" else _render(draw, value)
        items.append(f"{json.dumps(key)}:{text}")
    return "{" + ",".join(items) + "}"


@st.composite
def shaped_body(draw: st.DrawFn, provider: str) -> bytes:
    template = TEMPLATES[provider]
    if draw(st.booleans()):
        return _render_sane(template).encode()
    return _render(draw, template).encode()


def _render_sane(node: dict[str, Any] | str) -> str:
    if isinstance(node, str):
        return node
    return "{" + ",".join(f"{json.dumps(k)}:{_render_sane(v)}" for k, v in node.items()) + "}"


@st.composite
def bodies(draw: st.DrawFn, provider: str) -> bytes:
    kind = draw(
        st.sampled_from(
            ["shaped", "shaped", "json", "text", "binary", "boundary", "oversize", "not_utf8"]
        )
    )
    if kind == "shaped":
        return draw(shaped_body(provider))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "text":
        return draw(st.text(max_size=200)).encode()
    if kind == "binary":
        return draw(st.binary(max_size=300))
    base = _render_sane(TEMPLATES[provider]).encode()
    if kind == "boundary":  # JSON allows trailing whitespace: a valid body of the limit's size
        return base + b" " * (MAX_BODY + draw(st.integers(-2, 1)) - len(base))
    if kind == "oversize":
        size = draw(st.integers(MAX_BODY + 1, 3 * MAX_BODY))
        return base + draw(st.sampled_from([b" ", b"x", b"\xff"])) * (size - len(base))
    # not UTF-8: a lone byte, latin-1 text, UTF-16, a BOM
    how = draw(st.sampled_from(["byte", "latin1", "utf16", "bom"]))
    if how == "byte":
        at = draw(st.integers(0, len(base)))
        return (
            base[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]))
            + base[at:]
        )
    if how == "latin1":
        return base.replace(b"Can", "Ç\u00e0n".encode("latin-1"))[:-1] + "é}".encode("latin-1")
    if how == "utf16":
        return base.decode().encode("utf-16")
    return b"\xef\xbb\xbf" + base  # UTF-8 with a BOM: valid UTF-8, not JSON


@dataclass(repr=False)
class Hostile:
    """One request of the property test, and what is known about it before sending it."""

    method: str
    path: str
    target: str  # a provider, "unconfigured" or "get"
    shape: str  # the provider whose body and headers it imitates
    transport: str  # "aiohttp" (UTF-8 headers) or "latin1" (raw socket, http.client style)
    body: bytes = b""
    chunk_size: int | None = None
    encoding: str = "identity"  # "gzip", "gzip-garbage", "deflate-garbage"
    signature: str = "none"  # none, garbage, valid, stale, future, tampered:<how>
    msg_id: str = "msg_1"
    offset_s: int = 0
    unsigned: list[tuple[str, str]] = field(default_factory=list)  # before the signature
    garbage: list[tuple[str, str]] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)  # after the signature
    params: dict[str, str] | None = None

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return (
            f"Hostile({self.method} {self.path} via {self.transport}, shape={self.shape}, "
            f"signature={self.signature}, encoding={self.encoding}, chunk={self.chunk_size}, "
            f"msg_id={self.msg_id!r}, unsigned={self.unsigned!r}, garbage={self.garbage!r}, "
            f"extra={self.extra!r}, params={self.params!r}, body[{len(self.body)}]={body!r})"
        )

    @property
    def label(self) -> str:
        """The provider label ingest counts this request under."""
        name = self.path.removeprefix("/webhooks/")
        return name[:64]

    @property
    def decoded_size(self) -> int:
        return len(self.body)

    @property
    def utf8(self) -> bool:
        try:
            self.body.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True


ID_ALPHABET = string.ascii_letters + string.digits + "_-."


@st.composite
def hostile_requests(draw: st.DrawFn) -> Hostile:
    target = draw(st.sampled_from([*ROUTES, "unconfigured", "get"]))
    transport = draw(st.sampled_from(["aiohttp", "latin1"]))
    latin1 = transport == "latin1"
    if target == "get":
        return draw(get_requests())
    if target == "unconfigured":
        name = draw(st.text(alphabet=ID_ALPHABET + "~", min_size=1, max_size=90))
        name = name if name.strip(".") else name + "x"
        if draw(st.booleans()):
            path = "/webhooks/standard/" + (name if name != "crm" else "crm2")
        else:
            path = "/webhooks/" + (name if name not in ROUTES else name + "2")
            path = path if path != "/webhooks/standard" else path + "2"
        shape = draw(st.sampled_from(sorted(ROUTES)))
    else:
        path = ROUTES[target]
        shape = target
    request = Hostile("POST", path, target, shape, transport)
    request.body = draw(bodies(shape))
    request.chunk_size = draw(st.none() | st.integers(1, 4096))
    request.encoding = draw(
        st.sampled_from(
            ["identity", "identity", "identity", "gzip", "gzip-garbage", "deflate-garbage"]
        )
    )
    modes = ["none", "garbage", "valid", "valid", "tampered"]
    if shape in ("agentmail", "standard", "stripe"):
        modes += ["stale", "future"]
    request.signature = draw(st.sampled_from(modes))
    if request.signature == "tampered":
        hows = ["body", "signature", "drop", "secret"]
        if shape in ("agentmail", "standard", "stripe"):
            hows += ["timestamp"]
        if shape in ("agentmail", "standard"):
            hows += ["id"]
        request.signature = "tampered:" + draw(st.sampled_from(hows))
    if request.signature == "garbage":
        for header in SIGNATURE_HEADERS[shape]:
            if draw(st.integers(0, 4)):
                request.garbage.append((header, draw(garbage_for(header, latin1=latin1))))
    ids = st.text(alphabet=ID_ALPHABET, min_size=1, max_size=40)
    if not latin1:  # UTF-8 both ways: any id survives; http.client's latin-1 would not
        ids = ids | header_text(latin1=False, max_size=40).filter(lambda s: s.strip() == s != "")
    request.msg_id = draw(ids)
    request.offset_s = draw(st.integers(30, 10**8))
    if shape == "github":  # not covered by the signature
        for header in ("X-GitHub-Delivery", "X-GitHub-Event"):
            if draw(st.integers(0, 3)):
                value = draw(st.just(str(uuid.uuid4())) | header_text(latin1=latin1))
                request.unsigned.append((header, value))
    content_type = draw(
        st.sampled_from(
            [
                "application/json",
                "application/json",
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
                "application/json; charset=utf-16",
                "",
            ]
        )
        | header_text(latin1=latin1, max_size=30)
    )
    request.unsigned.append(("Content-Type", content_type))
    names = st.text(alphabet=TCHAR, min_size=1, max_size=24).filter(
        lambda n: n.lower() not in FRAMING
    )
    request.extra = draw(st.lists(st.tuples(names, header_text(latin1=latin1)), max_size=4))
    return request


@st.composite
def get_requests(draw: st.DrawFn) -> Hostile:
    path = draw(
        st.sampled_from(["/webhooks/nylas", "/webhooks/nylas", "/healthz", "/readyz", "/metrics"])
    )
    params: dict[str, str] = draw(
        st.dictionaries(
            st.text(alphabet=ID_ALPHABET, min_size=1, max_size=10).filter(
                lambda k: k != "challenge"
            ),
            st.text(max_size=20),
            max_size=2,
        )
    )
    if path == "/webhooks/nylas" and draw(st.integers(0, 4)):
        params["challenge"] = draw(
            st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)
        )
    names = st.text(alphabet=TCHAR, min_size=1, max_size=24).filter(
        lambda n: n.lower() not in FRAMING
    )
    extra = draw(st.lists(st.tuples(names, header_text(latin1=False)), max_size=3))
    return Hostile("GET", path, "get", "nylas", "aiohttp", extra=extra, params=params)


def _flip(value: str) -> str:
    """A signature with its first significant character changed (never a padding bit)."""
    prefix = next((p for p in ("sha256=", "v1,") if value.startswith(p)), "")
    if value.startswith("t="):
        prefix = value[: value.index("v1=") + 3]
    first = value[len(prefix)]
    return prefix + ("1" if first == "0" else "0") + value[len(prefix) + 1 :]


def _wire(request: Hostile) -> tuple[list[tuple[str, str]], bytes]:
    """The headers and body bytes of a POST, signed at the moment it is sent."""
    body, shape = request.body, request.shape
    headers = list(request.unsigned)
    mode, _, how = request.signature.partition(":")
    now = time.time()
    if mode in ("valid", "tampered"):
        signed = sign(shape, body, at=now, msg_id=request.msg_id, wrong_secret=how == "secret")
        if how == "body":
            body = body[:-1] + bytes([body[-1] ^ 0x01]) if body else b"x"
        elif how == "signature":
            signed[-1] = (signed[-1][0], _flip(signed[-1][1]))
        elif how == "drop":
            signed.pop(len(signed) // 2)
        elif how == "timestamp" and shape == "stripe":
            _, _, rest = signed[0][1].partition(",")
            signed = [("Stripe-Signature", f"t={int(now) + 1},{rest}")]
        elif how == "timestamp":
            signed = [(k, str(int(v) + 1) if k.endswith("-timestamp") else v) for k, v in signed]
        elif how == "id":
            signed = [(k, v + "x" if k.endswith("-id") else v) for k, v in signed]
        headers += signed
    elif mode in ("stale", "future"):
        tolerance = 300
        shift = tolerance + request.offset_s
        headers += sign(
            shape, body, at=now - shift if mode == "stale" else now + shift, msg_id=request.msg_id
        )
    elif mode == "garbage":
        headers += request.garbage
    headers += request.extra
    if request.encoding == "gzip":
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    elif request.encoding == "gzip-garbage":
        headers.append(("Content-Encoding", "gzip"))
    elif request.encoding == "deflate-garbage":
        headers.append(("Content-Encoding", "deflate"))
    return headers, body


def _send(live: LiveIngest, request: Hostile) -> Answer | None:
    if request.method == "GET":
        return live.run(
            live.request("GET", request.path, headers=request.extra, params=request.params)
        )
    headers, body = _wire(request)
    if request.transport == "aiohttp":
        return live.run(
            live.request(
                "POST", request.path, headers=headers, body=body, chunk_size=request.chunk_size
            )
        )
    data = http_request("POST", request.path, list(headers), body, chunk_size=request.chunk_size)
    return live.run(live.raw(data))


@dataclass
class Tally:
    accepted: Counter[str] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)


def _judge(request: Hostile, answer: Answer | None, tally: Tally) -> None:
    """Every answer: documented, never 5xx, 204 only when validly signed; count it."""
    assert answer is not None, "the server closed the connection without answering"
    assert answer.status < 500, (answer.status, answer.body[:500])
    for secret in SECRETS:
        assert secret.encode() not in answer.body
    tally.statuses[(request.target, answer.status)] += 1
    if request.method == "GET":
        _judge_get(request, answer)
        return
    assert answer.status in POST_STATUSES - {503}, answer
    mode = request.signature.partition(":")[0]
    if answer.status == 204:
        assert mode == "valid", f"{request.signature} delivery accepted"
        assert request.utf8
        assert request.encoding in ("identity", "gzip")
        tally.accepted[request.label] += 1
        return
    garbled = request.encoding in ("gzip-garbage", "deflate-garbage")
    if garbled and (answer.status, answer.content_type) == (400, "text/plain"):
        return  # the decoder failed inside aiohttp's parser: refused before any route
    check = answer.error()["check"]
    if request.target == "unconfigured":
        assert (answer.status, check) == (404, "not_configured")
        # a route no provider has is counted under one label, so a scan cannot grow /metrics
        label = request.label if request.label in KNOWN_PROVIDERS else "unknown"
        tally.rejected[(label, check)] += 1
        return
    tally.rejected[(request.label, check)] += 1
    assert answer.status != 404
    if garbled:
        assert answer.status in (400, 401, 413)
        return
    if request.decoded_size > MAX_BODY:
        assert (answer.status, check) == (413, "body_too_large") or (
            request.encoding == "gzip" and answer.status == 401
        )
        return
    assert answer.status != 413, "a body within the limit refused as too large"
    if request.encoding == "gzip" and answer.status == 401:
        return  # signed over the decoded bytes; an ingest that does not decode refuses it
    if mode == "valid" and request.utf8:
        assert answer.status == 400, answer
        assert check in PAYLOAD_CHECKS
    elif mode in ("stale", "future") and request.utf8:
        assert (answer.status, check) == (401, "timestamp_out_of_tolerance")
    else:
        assert answer.status == 401, answer
        assert check in VERIFICATION_CHECKS


def _judge_get(request: Hostile, answer: Answer) -> None:
    if request.path == "/webhooks/nylas":
        assert request.params is not None
        if "challenge" in request.params:
            assert answer.status == 200
            assert answer.content_type == "text/plain"
            assert answer.body.decode() == request.params["challenge"]
        else:
            assert (answer.status, answer.error()["check"]) == (400, "no_challenge")
    elif request.path == "/metrics":
        assert answer.status == 200
        assert answer.content_type == "text/plain"
    else:
        assert answer.status == 200, answer
        assert answer.content_type == "application/json"


# -- 1. property-based ------------------------------------------------------------------


def test_hostile_requests_are_answered_as_documented_and_only_verified_ones_reach_kafka(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    live = live_ingest(max_body_bytes=MAX_BODY)
    tally = Tally()

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )
    @given(request=hostile_requests())
    def one(request: Hostile) -> None:
        note(repr(request))
        answer = _send(live, request)
        note(repr(answer))
        _judge(request, answer, tally)

    one()

    accepted, rejected = live.counters()
    records = live.records()
    assert len(records) == sum(tally.accepted.values()), "records that no 204 accounts for"
    assert accepted == tally.accepted
    assert rejected == tally.rejected, "rejections and their counters differ"
    # the run tried what it is meant to try
    seen = {status for _, status in tally.statuses}
    assert {200, 204, 400, 401, 404, 413} <= seen, tally.statuses


RAW_NASTY: dict[str, tuple[Callable[[], bytes], set[int]]] = {
    # header bytes 0x80-0xff reach ingest (obs-text); they never verify
    "svix headers of bytes 0x80-0xff": (
        lambda: http_request(
            "POST",
            "/webhooks/agentmail",
            [
                ("svix-id", b"\xff\xfe\x80"),
                ("svix-timestamp", b"\xc3\xa9" + str(int(time.time())).encode()),
                ("svix-signature", b"v1,\xff" + b"A" * 43),
            ],
            payloads.dumps(payloads.agentmail_received()),
        ),
        {401},
    ),
    "stripe signature of bytes 0x80-0xff": (
        lambda: http_request(
            "POST", "/webhooks/stripe", [("Stripe-Signature", b"t=\xff,v1=\xfe")], b"{}"
        ),
        {401},
    ),
    "nylas signature of 64 bytes 0xe9": (
        lambda: http_request(
            "POST", "/webhooks/nylas", [("X-Nylas-Signature", b"\xe9" * 64)], b"{}"
        ),
        {401},
    ),
    "github signature of bytes 0x80-0xff": (
        lambda: http_request(
            "POST", "/webhooks/github", [("X-Hub-Signature-256", b"sha256=\x80" * 9)], b"{}"
        ),
        {401},
    ),
    "standard source of bytes 0x80-0xff (percent-encoded)": (
        lambda: http_request("POST", "/webhooks/standard/%ff%fe%80", [], b"{}"),
        {404},
    ),
    "chunked body above the limit, terminated": (
        lambda: http_request(
            "POST", "/webhooks/nylas", [], b"[" + b"1," * MAX_BODY + b"1]", chunk_size=1000
        ),
        {413},
    ),
    "chunked body above the limit in one chunk": (
        lambda: http_request(
            "POST", "/webhooks/agentmail", [], b"x" * (MAX_BODY + 1), chunk_size=MAX_BODY + 1
        ),
        {413},
    ),
    "Content-Length above the limit, short body": (
        lambda: (
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n{}" % (MAX_BODY + 1)
        ),
        {413},
    ),
    "Expect: 100-continue above the limit": (
        lambda: (
            b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (10 * MAX_BODY)
        ),
        {413},
    ),
    "gzip bomb: 4 MiB of zeros in a few KiB": (
        lambda: http_request(
            "POST",
            "/webhooks/nylas",
            [("Content-Encoding", "gzip")],
            gzip.compress(b"\0" * (4 << 20), compresslevel=9),
        ),
        {413},
    ),
    # refused by the HTTP parser before any route: aiohttp's plain-text 400
    "NUL in a header value": (
        lambda: http_request("POST", "/webhooks/nylas", [("X-Nylas-Signature", b"a\0b")], b"{}"),
        {400},
    ),
    "C0 control in a header value": (
        lambda: http_request("POST", "/webhooks/stripe", [("Stripe-Signature", b"t=1\x01")], b"{}"),
        {400},
    ),
    "header name that is not a token": (
        lambda: http_request("POST", "/webhooks/github", [("X Hub", b"1")], b"{}"),
        {400},
    ),
    "header line of 64 KiB": (
        lambda: http_request(
            "POST", "/webhooks/nylas", [("X-Nylas-Signature", b"a" * 65536)], b"{}"
        ),
        {400},
    ),
    "two Content-Types": (
        lambda: http_request(
            "POST",
            "/webhooks/nylas",
            [("Content-Type", "application/json"), ("content-type", "text/plain")],
            b"{}",
        ),
        {400},
    ),
    "two Content-Lengths": (
        lambda: (
            b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            b"Content-Length: 3\r\n\r\n{}"
        ),
        {400},
    ),
    "Content-Length and Transfer-Encoding": (
        lambda: (
            b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        ),
        {400},
    ),
    "negative Content-Length": (
        lambda: b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
        {400},
    ),
    "Content-Length of 30 digits": (
        lambda: (
            b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + b"9" * 30
            + b"\r\n\r\n{}"
        ),
        {400},
    ),
    "chunk size that is not hex": (
        lambda: (
            b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"zz\r\n{}\r\n0\r\n\r\n"
        ),
        {400},
    ),
    "unknown Transfer-Encoding": (
        lambda: b"POST /webhooks/nylas HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: foo\r\n\r\n{}",
        {400},
    ),
    "Content-Encoding br (no decoder)": (
        lambda: http_request("POST", "/webhooks/nylas", [("Content-Encoding", "br")], b"hello"),
        {400},
    ),
}


def test_nastier_raw_requests_get_documented_answers_and_write_nothing(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    live = live_ingest(max_body_bytes=MAX_BODY)
    app_rejections = 0
    for name, (build, statuses) in RAW_NASTY.items():
        answer = live.run(live.raw(build()))
        assert answer is not None, name
        assert answer.status in statuses, (name, answer)
        if answer.content_type == "application/json":
            answer.error()
            app_rejections += 1
        else:  # the HTTP parser's own refusal: the request never reached ingest
            assert answer.status == 400, (name, answer)

    # a Content-Length larger than the body, then the client stops sending: no answer
    # can be given, and nothing may be recorded or reported as accepted
    body = payloads.dumps(payloads.nylas_message())
    head = http_request("POST", "/webhooks/nylas", list(signing.nylas_headers(body).items()))
    truncated = head.replace(b"Content-Length: 0", b"Content-Length: %d" % (len(body) + 100))

    async def half_close() -> Answer | None:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        writer.write(truncated + body)
        await writer.drain()
        writer.write_eof()
        try:
            return await asyncio.wait_for(read_answer(reader), 5)
        finally:
            writer.close()

    answer = live.run(half_close())
    assert answer is None or answer.status < 500

    # a validly signed delivery sent chunked is accepted: the limit is not a chunk refusal
    good = payloads.dumps(payloads.nylas_message())
    answer = live.run(
        live.raw(
            http_request(
                "POST",
                "/webhooks/nylas",
                list(signing.nylas_headers(good).items()),
                good,
                chunk_size=7,
            )
        )
    )
    assert answer is not None
    assert answer.status == 204

    accepted, rejected = live.counters()
    assert accepted == Counter({"nylas": 1})
    # the half-closed body is counted too: the client went away mid-body
    assert rejected[("nylas", "client_disconnected")] == 1
    assert sum(rejected.values()) == app_rejections + 1
    [record] = live.records()
    assert json.loads(record.value())["raw"].encode() == good


# -- 2. schemathesis -------------------------------------------------------------------


def test_openapi_description_holds_against_a_live_ingest(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    import requests
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import status_code_conformance

    live = live_ingest()
    schema = schemathesis.openapi.from_path(OPENAPI)
    schema.validate()  # against the OpenAPI 3.0 meta-schema
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert labels == {
        "POST /webhooks/agentmail",
        "POST /webhooks/nylas",
        "GET /webhooks/nylas",
        "POST /webhooks/stripe",
        "POST /webhooks/github",
        "POST /webhooks/standard/{source}",
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
    }
    statuses: Counter[tuple[str, int]] = Counter()
    rejections: list[str] = []
    session = requests.Session()

    def exercise(operation: Any, mode: Any) -> None:
        label = f"{operation.method.upper()} {operation.path}"

        @settings(
            max_examples=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def call(case: Any) -> None:
            response = case.call(base_url=live.url, session=session, timeout=10)
            statuses[(label, response.status_code)] += 1
            assert response.status_code < 500, (label, response.status_code, response.text)
            if label.startswith("POST") and response.status_code >= 300:
                content_type = (response.headers.get("content-type") or [""])[0]
                if content_type.startswith("application/json"):
                    rejections.append(response.json()["check"])
                else:  # aiohttp's own answer: no route matched (e.g. an empty source)
                    assert response.status_code == 404, (label, response.text)
            for secret in SECRETS:
                assert secret not in response.text
            case.validate_response(response, checks=[not_a_server_error, status_code_conformance])

        call()

    for operation in operations:
        exercise(operation, GenerationMode.POSITIVE)
        if operation.path.startswith("/webhooks/"):  # something to break: headers, query
            exercise(operation, GenerationMode.NEGATIVE)
    session.close()

    assert live.records() == [], "an unsigned request reached Kafka"
    accepted, rejected = live.counters()
    assert accepted == Counter()
    assert sum(rejected.values()) == len(rejections), "rejections the counters missed"
    assert Counter(reason for _, reason in rejected.elements()) == Counter(rejections)
    assert statuses[("POST /webhooks/agentmail", 401)] > 0, statuses
    assert statuses[("POST /webhooks/standard/{source}", 404)] > 0, statuses
    assert statuses[("GET /webhooks/nylas", 200)] > 0, statuses


# -- 3. security ------------------------------------------------------------------------


def _calls(function: Callable[..., Any]) -> set[str]:
    """Dotted names of everything ``function`` calls, from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names.add(ast.unparse(node.func))
    return names


def test_signatures_are_compared_in_constant_time() -> None:
    # ours: Nylas and GitHub go through one comparison, hmac.compare_digest
    assert "_verify_hex_hmac" in _calls(verify.verify_nylas)
    assert "_verify_hex_hmac" in _calls(verify.verify_github)
    assert "hmac.compare_digest" in _calls(verify._verify_hex_hmac)
    hex_source = inspect.getsource(verify._verify_hex_hmac)
    compares = [
        n for n in ast.walk(ast.parse(textwrap.dedent(hex_source))) if isinstance(n, ast.Compare)
    ]
    assert compares == [], "a signature compared with == / != is not constant time"

    # Svix (AgentMail) delegates to standardwebhooks, which uses hmac.compare_digest
    assert "webhook.verify" in _calls(verify.verify_svix)
    inner = svix.webhooks.Webhook(signing.SVIX_SECRET)._inner
    assert isinstance(inner, standardwebhooks.webhooks.Webhook)
    assert "self._inner.verify" in _calls(svix.webhooks.Webhook.verify)
    assert "webhook.verify" in _calls(verify.verify_standard)
    assert "hmac.compare_digest" in _calls(standardwebhooks.webhooks.Webhook.verify)

    # Stripe: verify_header compares with stripe's secure_compare = hmac.compare_digest
    assert "stripe.WebhookSignature.verify_header" in _calls(verify.verify_stripe)
    assert "secure_compare" in _calls(stripe.WebhookSignature.verify_header)
    secure_compare = sys.modules[stripe.WebhookSignature.__module__].secure_compare
    assert "hmac.compare_digest" in _calls(secure_compare)


def test_a_captured_delivery_replayed_after_the_tolerance_is_refused(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    live = live_ingest()
    now = time.time()
    agentmail = payloads.dumps(payloads.agentmail_received(event_id="evt_replayed"))
    stripe_body = payloads.dumps(payloads.stripe_event(event_id="evt_stripe_replayed"))

    def svix_capture(at: float) -> dict[str, str]:
        moment = datetime.fromtimestamp(at, UTC)
        signature = svix.webhooks.Webhook(signing.SVIX_SECRET).sign(
            "msg_cap", moment, agentmail.decode()
        )
        return {
            "svix-id": "msg_cap",
            "svix-timestamp": str(int(at)),
            "svix-signature": signature,
            "content-type": "application/json",
        }

    def stripe_capture(at: float) -> dict[str, str]:
        header = stripe.WebhookSignature.generate_signature_header(
            stripe_body.decode(), signing.STRIPE_SECRET, timestamp=int(at)
        )
        return {"Stripe-Signature": header, "content-type": "application/json"}

    assert live.settings.stripe_tolerance_s == 300
    for path, body, capture in (
        ("/webhooks/agentmail", agentmail, svix_capture),
        ("/webhooks/stripe", stripe_body, stripe_capture),
    ):
        for at in (now - 360, now + 360):  # 6 minutes old, 6 minutes ahead
            answer = live.post(path, body, capture(at))
            assert (answer.status, answer.error()["check"]) == (401, "timestamp_out_of_tolerance")
        answer = live.post(path, body, capture(now - 240))  # the same capture, 4 minutes on
        assert answer.status == 204, answer

    events = sorted(json.loads(r.value())["event_id"] for r in live.records())
    assert events == ["evt_replayed", "evt_stripe_replayed"]
    _, rejected = live.counters()
    assert rejected == Counter(
        {
            ("agentmail", "timestamp_out_of_tolerance"): 2,
            ("stripe", "timestamp_out_of_tolerance"): 2,
        }
    )


@pytest.fixture
def cli_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], io.StringIO]]:
    """Logging configured as the CLI does, into a buffer; restored afterwards."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def configure(json_lines: bool) -> io.StringIO:
        stream = io.StringIO()
        stderr, sys.stderr = sys.stderr, stream  # configure_logging writes to sys.stderr
        try:
            configure_logging("DEBUG", json=json_lines)
        finally:
            sys.stderr = stderr
        # a fresh proxy: the module's own may already be cached on an earlier configuration
        monkeypatch.setattr(ingest.app, "log", structlog.get_logger("onceonly.ingest"))
        return stream

    yield configure
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("json_lines", [False, True], ids=["console", "json"])
def test_secrets_and_signatures_never_appear_in_logs_or_answers(
    live_ingest: Callable[..., LiveIngest],
    cli_logs: Callable[[bool], io.StringIO],
    json_lines: bool,
) -> None:
    stream = cli_logs(json_lines)
    live = live_ingest(max_body_bytes=4096)
    sent_signatures: list[str] = []
    answers: list[Answer] = []

    def post(path: str, body: bytes, headers: dict[str, str]) -> Answer:
        for name, value in headers.items():
            if "signature" in name.lower():  # the digests themselves, without t= / v1, / sha256=
                sent_signatures.extend(t for t in re.split(r"[ ,=]", value) if len(t) >= 40)
        answer = live.post(path, body, headers)
        answers.append(answer)
        return answer

    builders: dict[str, tuple[Callable[[], dict[str, Any]], Callable[..., dict[str, str]]]] = {
        "agentmail": (payloads.agentmail_received, signing.svix_headers),
        "nylas": (payloads.nylas_message, signing.nylas_headers),
        "stripe": (payloads.stripe_event, signing.stripe_headers),
        "github": (payloads.github_issue, signing.github_headers),
        "standard": (payloads.standard_event, signing.standard_headers),
    }
    other_key = "whsec_" + base64.b64encode(b"an entirely different key").decode()
    wrong = {
        "agentmail": other_key,
        "standard": other_key,
        "stripe": "whsec_other",
        "nylas": "other",
        "github": "other",
    }
    for provider, (payload, headers_for) in builders.items():
        body = payloads.dumps(payload())
        assert post(ROUTES[provider], body, headers_for(body)).status == 204
        bad = headers_for(body, secret=wrong[provider])
        assert post(ROUTES[provider], body, bad).status == 401
        assert post(ROUTES[provider], body + b" ", headers_for(body)).status == 401
        assert post(ROUTES[provider], b"\xff" + body, headers_for(body)).status == 401
        assert post(ROUTES[provider], b"x" * 5000, headers_for(body)).status == 413
    assert post("/webhooks/zendesk", b"{}", {}).status == 404
    assert post("/webhooks/standard/other", b"{}", signing.standard_headers(b"{}")).status == 404
    malformed = {**signing.svix_headers(b"{}"), "svix-signature": "v1" + "A" * 43}
    assert post("/webhooks/agentmail", b"{}", malformed).status == 401
    assert post("/webhooks/nylas", b"hello", signing.nylas_headers(b"hello")).status == 400
    # the paths of the bugs below, whatever they answer: no secret in a traceback either
    gzip_header = {**signing.nylas_headers(b"{}"), "Content-Encoding": "gzip"}
    post("/webhooks/nylas", b"{}", gzip_header)
    post("/webhooks/stripe", b'{"id":"\\ud800"}', signing.stripe_headers(b'{"id":"\\ud800"}'))
    answers.append(live.get("/metrics"))
    answers.append(live.get("/webhooks/nylas?challenge=abc"))

    logged = stream.getvalue()
    assert "delivery rejected" in logged, "the capture saw no log line"
    assert "delivery stored" in logged
    assert len(sent_signatures) >= 20
    for secret in SECRETS:
        assert secret not in logged, f"a secret is logged: {secret[:8]}..."
        for answer in answers:
            assert secret.encode() not in answer.body
            assert all(secret not in value for value in answer.headers.values())
    for signature in sent_signatures:
        assert signature not in logged, "a signature is logged"


def test_the_body_limit_is_enforced_before_the_body_is_read_whole(
    live_ingest: Callable[..., LiveIngest],
) -> None:
    limit = 64 * 1024
    live = live_ingest(max_body_bytes=limit)
    body = payloads.dumps(payloads.nylas_message())
    signed = list(signing.nylas_headers(body).items())

    async def declared_10_mib_sent_100_kib() -> tuple[Answer | None, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        head = http_request("POST", "/webhooks/nylas", signed)
        writer.write(head.replace(b"Content-Length: 0", b"Content-Length: %d" % (10 << 20)))
        started = time.monotonic()
        with contextlib.suppress(ConnectionError):
            writer.write(b"x" * (100 * 1024))
            await writer.drain()
        try:  # the other 9.9 MiB are never sent
            return await asyncio.wait_for(read_answer(reader), 5), time.monotonic() - started
        finally:
            writer.close()

    async def chunked_without_end() -> tuple[Answer | None, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        head = http_request("POST", "/webhooks/nylas", signed, chunk_size=1)
        writer.write(head.split(b"\r\n\r\n")[0] + b"\r\n\r\n")  # headers only
        sent = 0

        async def stream_forever() -> None:
            nonlocal sent
            with contextlib.suppress(ConnectionError):
                while sent < (10 << 20):  # never the terminating chunk
                    writer.write(b"4000\r\n" + b"y" * 0x4000 + b"\r\n")
                    await writer.drain()
                    sent += 0x4000
                    await asyncio.sleep(0.005)
            await asyncio.Event().wait()

        streaming = asyncio.create_task(stream_forever())
        try:
            answer = await asyncio.wait_for(read_answer(reader), 10)
            return answer, sent
        finally:
            streaming.cancel()
            writer.close()

    answer, elapsed = live.run(declared_10_mib_sent_100_kib())
    assert answer is not None, "no answer before the declared body was sent"
    assert (answer.status, answer.error()["check"]) == (413, "body_too_large")
    assert elapsed < 5

    answer, sent = live.run(chunked_without_end())
    assert answer is not None, "no answer to a chunked body past the limit"
    assert (answer.status, answer.error()["check"]) == (413, "body_too_large")
    assert limit < sent < (10 << 20), sent

    _, rejected = live.counters()
    assert rejected == Counter({("nylas", "body_too_large"): 2})
    assert live.records() == []


# -- regressions: 500s this suite found in ingest, now counted 4xx ------------------


def _not_a_server_error(answer: Answer | None) -> None:
    assert answer is not None
    assert answer.status < 500, f"{answer.status}: {answer.body[:200]!r}"


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_regression_a_body_that_does_not_decode_as_its_content_encoding_is_not_a_500(
    live_ingest: Callable[..., LiveIngest], coding: str
) -> None:
    """Was a 500: ``Content-Encoding: gzip`` (or deflate) on a body that is not compressed.

    aiohttp decompresses request bodies itself; the decoder's error surfaces in
    ``Ingest._read_body`` as ``aiohttp.web.RequestPayloadError``, which ``_deliver`` does
    not catch: 500 Internal Server Error, text/plain, not counted on /metrics. Any client
    can send it, to any configured route, without a signature.
    Expected: a documented 4xx JSON answer whose ``check`` labels a counted rejection.
    """
    live = live_ingest()
    body = payloads.dumps(payloads.nylas_message())
    headers = {**signing.nylas_headers(body), "Content-Encoding": coding}

    answer = live.post("/webhooks/nylas", body, headers)

    _not_a_server_error(answer)
    assert answer.status in (400, 401)
    _, rejected = live.counters()
    assert rejected == Counter({("nylas", answer.error()["check"]): 1})
    assert live.records() == []


VERIFIED_BUT_HOSTILE: dict[str, tuple[str, bytes]] = {
    "stripe id with a lone surrogate escape": ("stripe", b'{"id":"\\ud800"}'),
    "nylas id with a lone surrogate escape": ("nylas", b'{"id":"\\udcff"}'),
    "agentmail event_type with a lone surrogate escape": (
        "agentmail",
        b'{"event_id":"e1","event_type":"\\ud800"}',
    ),
    "standard thread_id with a lone surrogate escape": (
        "standard",
        b'{"type":"t","data":{"thread_id":"\\ud800"}}',
    ),
    "nylas time beyond a float": ("nylas", b'{"id":"n1","time":1' + b"0" * 400 + b"}"),
    "stripe created beyond a float": ("stripe", b'{"id":"e1","created":' + b"9" * 400 + b"}"),
    "nylas body nested 3000 deep": ("nylas", b"[" * 3000 + b"]" * 3000),
}


@pytest.mark.parametrize("case", sorted(VERIFIED_BUT_HOSTILE))
def test_regression_a_verified_but_hostile_body_is_not_a_500(
    live_ingest: Callable[..., LiveIngest], case: str
) -> None:
    """Was a 500: validly signed bodies that crash normalise / Envelope.encode with a 500.

    * a JSON string escape of a lone surrogate (``"\\ud800"``) in an id, type or thread
      field: ``Envelope.encode()`` / ``.headers()`` raise UnicodeEncodeError;
    * an integer ``time`` (Nylas) / ``created`` (Stripe) beyond a float:
      ``normalise._epoch`` divides it outside its try: OverflowError;
    * nesting deeper than the recursion limit: ``json.loads`` raises RecursionError,
      which ``normalise._parse`` does not catch.
    Expected: 204 (recorded) or 400 (counted), never 500.
    """
    provider, body = VERIFIED_BUT_HOSTILE[case]
    live = live_ingest()
    headers = dict(sign(provider, body, at=time.time(), msg_id="msg_hostile"))

    answer = live.post(ROUTES[provider], body, headers)

    _not_a_server_error(answer)
    accepted, rejected = live.counters()
    if answer.status == 204:
        assert len(live.records()) == 1
        assert sum(accepted.values()) == 1
    else:
        assert answer.status == 400
        assert rejected == Counter({(ROUTES[provider][10:], answer.error()["check"]): 1})
        assert live.records() == []


@pytest.mark.parametrize("header", ["X-GitHub-Delivery", "X-GitHub-Event"])
def test_regression_a_github_header_outside_the_signature_in_latin1_is_not_a_500(
    live_ingest: Callable[..., LiveIngest], header: str
) -> None:
    """Was a 500: ``X-GitHub-Delivery`` / ``X-GitHub-Event`` are not covered by GitHub's signature.

    A byte 0x80-0xff in them (``"é"`` as requests / http.client send it, latin-1) reaches
    the normaliser as a surrogate escape (aiohttp decodes headers as UTF-8 with
    surrogateescape); ``Envelope.encode()`` / ``.headers()`` then raise UnicodeEncodeError:
    500. Anyone holding one captured GitHub delivery can replay it this way.
    Expected: 204 or a counted 400, never 500.
    """
    live = live_ingest()
    body = payloads.dumps(payloads.github_issue())
    headers: list[tuple[str, str | bytes]] = [
        *sign("github", body, at=time.time(), msg_id=""),
        ("X-GitHub-Delivery", str(uuid.uuid4())),
        ("X-GitHub-Event", "issues"),
    ]
    headers = [(k, "caf\u00e9".encode("latin-1")) if k == header else (k, v) for k, v in headers]

    answer = live.run(live.raw(http_request("POST", "/webhooks/github", headers, body)))

    _not_a_server_error(answer)
    assert answer is not None
    _, rejected = live.counters()
    if answer.status == 204:
        assert len(live.records()) == 1
    else:
        assert answer.status == 400
        assert sum(rejected.values()) == 1
        assert live.records() == []

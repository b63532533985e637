"""Hostile input against ingest on the real broker.

What the README promises, tried with input nobody should send: nothing a client can
send produces a 5xx, nothing unverified reaches Kafka, every rejection is counted by
reason on ``/metrics``, secrets never appear in logs or answers, the timestamp tolerance
holds, and the body limit is enforced before a body is read whole.

Each test runs ingest on a real TCP port (``LiveIngest``: an aiohttp ``AppRunner`` on an
event loop of its own thread, configured like ``onceonly.ingest.app.serve``) with all five
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

import asyncio
import gzip
import json
import time
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, example, given, note, settings

from testkit import payloads, signing
from tests.integration.ingest.hostile_live import (
    MAX_BODY,
    Answer,
    LiveIngest,
    http_request,
    read_answer,
)
from tests.integration.ingest.hostile_requests import (
    Hostile,
    Tally,
    _judge,
    _send,
    hostile_requests,
    valid_request,
)

pytestmark = pytest.mark.integration

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
    @example(request=valid_request("agentmail"))
    @example(request=valid_request("stripe"))
    @example(request=valid_request("github"))
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

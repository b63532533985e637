"""Security: constant-time comparison, the tolerance, no secret in a log, the body limit."""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import inspect
import io
import json
import logging
import re
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import standardwebhooks.webhooks
import stripe
import structlog
import svix.webhooks

import onceonly.ingest.app
from onceonly.foundation.logs import configure_logging
from onceonly.ingest import verify
from testkit import payloads, signing
from tests.integration.ingest.hostile_live import (
    ROUTES,
    SECRETS,
    Answer,
    LiveIngest,
    http_request,
    read_answer,
)

pytestmark = pytest.mark.integration


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
        monkeypatch.setattr(onceonly.ingest.app, "log", structlog.get_logger("onceonly.ingest"))
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

"""Regressions: 500s the hostile suite found in ingest, now counted 4xx."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from testkit import payloads, signing
from tests.integration.ingest.hostile_live import ROUTES, Answer, LiveIngest, http_request
from tests.integration.ingest.hostile_requests import sign

pytestmark = pytest.mark.integration


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

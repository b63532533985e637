"""The aiohttp transport under the agentmail SDK: same answers, httpx's errors."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from aiohttp import web

from devstack.ports import free_port
from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.agentmail.sender import AgentMailSender, agentmail_client
from onceonly.processors.mail.agentmail.transport import AiohttpTransport, ApiClient
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.agentmail_server import FakeAgentMail

INBOX = "agent@agentmail.to"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _record(message_id: str, text: str = "Thanks!") -> ReplyRecord:
    return ReplyRecord(
        key="reply-" + "a" * 64,
        inbox_id=INBOX,
        message_id=message_id,
        thread_key="agentmail:thr_1",
        state=ReplyState.PENDING,
        created_at=datetime.now(UTC),
        reply_text=text,
    )


async def test_a_reply_goes_out_with_its_idempotency_key(mail: FakeAgentMail) -> None:
    mail.seed_message(INBOX, message_id="<m1@x>", thread_id="thr_1")
    sender = AgentMailSender("test-key", base_url=mail.base_url, timeout_s=5)

    sent = await sender.reply(_record("<m1@x>"))
    await sender.aclose()

    assert [(e.idempotency_key, e.text) for e in mail.outbox] == [("reply-" + "a" * 64, "Thanks!")]
    assert sent == mail.outbox[0].sent_message_id


async def test_the_sdk_reads_an_api_error_through_it(mail: FakeAgentMail) -> None:
    sender = AgentMailSender("test-key", base_url=mail.base_url, timeout_s=5)

    with pytest.raises(SendError) as caught:
        await sender.reply(_record("<never-seeded@x>"))
    await sender.aclose()

    assert caught.value.failure is SendFailure.REJECTED
    assert "404" in str(caught.value)


async def test_a_slow_answer_is_an_httpx_timeout_and_a_retry(mail: FakeAgentMail) -> None:
    mail.seed_message(INBOX, message_id="<m1@x>", thread_id="thr_1")
    mail.set_latency(1.0)
    sender = AgentMailSender("test-key", base_url=mail.base_url, timeout_s=0.2)

    with pytest.raises(SendError) as caught:
        await sender.reply(_record("<m1@x>"))
    await sender.aclose()

    assert caught.value.failure is SendFailure.RETRY
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)


async def test_a_refused_connection_is_an_httpx_connect_error() -> None:
    client = agentmail_client("k", base_url=f"http://127.0.0.1:{free_port()}", timeout_s=2)

    with pytest.raises(httpx.ConnectError):
        await client.inboxes.messages.get(INBOX, "m1", request_options={"max_retries": 0})


@contextlib.asynccontextmanager
async def serving(handler: Handler, method: str = "GET", path: str = "/") -> AsyncIterator[str]:
    """``handler`` answering ``method`` ``path`` on a free local port; yields the URL."""
    app = web.Application()
    app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


def gzipped(payload: object) -> Handler:
    """A handler answering ``payload`` as gzip-compressed JSON."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=gzip.compress(json.dumps(payload).encode()),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    return handler


async def test_a_compressed_answer_is_decoded_once() -> None:
    payload = {"hello": "world"}

    async with (
        serving(gzipped(payload)) as url,
        httpx.AsyncClient(transport=AiohttpTransport()) as http,
    ):
        answer = await http.get(url)

    assert answer.json() == payload


async def test_the_api_client_keeps_no_cookie_and_sends_none_back() -> None:
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Cookie"))
        answer = web.json_response({"ok": True})
        answer.set_cookie("session", "abc")
        return answer

    async with serving(handler) as url, ApiClient(timeout_s=5) as http:
        first = await http.get(url)
        await http.get(url)
        kept = dict(http.cookies)

    assert "session=abc" in first.headers["set-cookie"]
    assert (seen, kept) == ([None, None], {})


def test_a_client_used_from_two_event_loops_works_in_both(fake_in_thread: str) -> None:
    transport = AiohttpTransport()

    async def ping() -> int:
        async with httpx.AsyncClient(transport=transport) as http:
            return (await http.get(f"{fake_in_thread}/_control/health")).status_code

    assert [asyncio.run(ping()), asyncio.run(ping())] == [200, 200]


@pytest.fixture
def fake_in_thread() -> Iterator[str]:
    with FakeAgentMail().serving_in_thread() as server:
        yield server.base_url


async def test_a_plain_request_sends_the_bytes_and_headers_httpx_would_send() -> None:
    # the mail API compares a key's request with its first one: the direct path must send
    # what httpx's own request machinery sends (an httpx that encoded JSON otherwise fails)
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        return web.json_response({"message_id": "<sent@x>"})

    payload = {"text": 'Grüße, ☃ "quoted"', "to": ["a@x"], "n": 1.5, "none": None}
    headers = {"Idempotency-Key": "reply-k", "Authorization": "Bearer t", "X-Fern-Language": "P"}
    async with serving(handler, "POST", "/v0/reply") as url:
        async with ApiClient(timeout_s=5) as direct:
            await direct.request("POST", url, json=payload, headers=headers, timeout=5.0)
        async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=5) as plain:
            await plain.request("POST", url, json=payload, headers=headers, timeout=5.0)

    (method, path, direct_headers, direct_body), (_, _, httpx_headers, httpx_body) = seen
    assert (method, path) == ("POST", "/v0/reply")
    assert direct_body == httpx_body
    lower = {k.lower(): v for k, v in direct_headers.items()}
    assert lower == {k.lower(): v for k, v in httpx_headers.items()}


async def test_the_sdks_reply_builds_no_httpx_request(
    mail: FakeAgentMail, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the direct path (issue 46): a reply costs no httpx Request, only the transport's call
    mail.seed_message(INBOX, message_id="<m1@x>", thread_id="thr_1")

    def refused(*args: object, **kwargs: object) -> httpx.Request:
        raise AssertionError("an httpx Request was built")

    monkeypatch.setattr(httpx.AsyncClient, "build_request", refused)
    sender = AgentMailSender("test-key", base_url=mail.base_url, timeout_s=5)

    sent = await sender.reply(_record("<m1@x>"))
    await sender.aclose()

    assert sent == mail.outbox[0].sent_message_id


async def test_a_compressed_answer_on_the_direct_path_is_decoded_once() -> None:
    payload = {"hello": "wörld"}

    async with serving(gzipped(payload)) as url, ApiClient(timeout_s=5) as http:
        answer = await http.request("GET", url, headers={"X-Api-Key": "k"}, timeout=5.0)

    assert answer.json() == payload

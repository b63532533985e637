"""The instant mail server counts, per replied-to message, emails (distinct keys) and requests."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench._instant_mail import Outbox

REPLY = "/v0/inboxes/support%40agentmail.to/messages/%3Cm-1%40mail.example.com%3E/reply"


async def test_a_repeated_key_is_a_request_not_an_email() -> None:
    outbox = Outbox()
    app = web.Application()
    app.router.add_post("/v0/{tail:.*}", outbox.reply)
    app.router.add_get("/_control/{what}", outbox.control)
    async with TestClient(TestServer(app)) as client:
        for key in ("reply-a", "reply-a", "reply-b"):
            response = await client.post(
                REPLY, json={"text": "hi"}, headers={"Idempotency-Key": key}
            )
            assert response.status == 200
        counts = await (await client.get("/_control/counts")).json()
        stats = await (await client.get("/_control/stats")).json()
        unknown = await client.get("/_control/nothing")
    assert counts == {"<m-1@mail.example.com>": [2, 3]}
    assert (stats["requests"], stats["sent"], stats["replayed"]) == (3, 2, 1)
    assert stats["first"] <= stats["last"]
    assert unknown.status == 404


async def test_a_restarted_workers_reconcile_finds_no_reply_and_raises_nothing() -> None:
    # a kill leaves replies *pending*: the next worker reads the message and its thread
    # before it sends again; a 404 there dead-lettered them (the kill runs' "never")
    from datetime import UTC, datetime

    from bench._instant_mail import thread
    from onceonly.processors.mail.agentmail.sender import AgentMailSender
    from onceonly.schemas.ledger import ReplyRecord, ReplyState

    app = web.Application()
    app.router.add_get("/v0/{tail:.*}", thread)
    async with TestServer(app) as server:
        sender = AgentMailSender("key", base_url=str(server.make_url("")), timeout_s=5)
        record = ReplyRecord(
            "k",
            "support@agentmail.to",
            "<m-1@mail.example.com>",
            "agentmail:t",
            ReplyState.PENDING,
            datetime.now(UTC),
            "hi",
        )
        try:
            assert await sender.find_reply(record) is None
        finally:
            await sender.aclose()

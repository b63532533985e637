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
    app.router.add_get("/_control/counts", outbox.counted)
    async with TestClient(TestServer(app)) as client:
        for key in ("reply-a", "reply-a", "reply-b"):
            response = await client.post(
                REPLY, json={"text": "hi"}, headers={"Idempotency-Key": key}
            )
            assert response.status == 200
        counts = await (await client.get("/_control/counts")).json()
    assert counts == {"<m-1@mail.example.com>": [2, 3]}

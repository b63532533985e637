"""The instant mail server: AgentMail's reply endpoint answered at once, ``python -m
bench._servers mail --port N``. It counts what it is sent: ``/_control/stats``,
``/_control/received`` (first arrival per message), ``/_control/counts`` (emails and
requests per message), ``/_control/texts``; an empty thread and a one-message thread for
a reconciling worker; ``/healthz``."""

from __future__ import annotations

import contextlib
import json
import time
from urllib.parse import unquote

from aiohttp import web


class Outbox:
    def __init__(self) -> None:
        self.requests = 0
        self.keys: dict[str, str] = {}
        self.replayed = 0
        self.first = 0.0
        self.last = 0.0
        #: replied-to Message-ID -> when its first send arrived (epoch seconds)
        self.received: dict[str, float] = {}
        #: replied-to Message-ID -> [emails (distinct keys), requests]
        self.counts: dict[str, list[int]] = {}
        #: replied-to Message-ID -> the text of its first send
        self.texts: dict[str, str] = {}

    async def reply(self, request: web.Request) -> web.StreamResponse:
        if not request.path.endswith("/reply"):
            return web.json_response({"name": "NotFoundError", "message": "not served"}, status=404)
        body = await request.read()
        self.requests += 1
        key = request.headers.get("Idempotency-Key") or f"no-key-{self.requests}"
        # .../messages/{message_id}/reply, the id quoted by the sender
        replied_to = unquote(request.raw_path.split("?", 1)[0].rsplit("/", 2)[-2])
        count = self.counts.setdefault(replied_to, [0, 0])
        count[1] += 1
        sent_id = self.keys.get(key)
        if sent_id is not None:
            self.replayed += 1
            return web.json_response(
                {"message_id": sent_id, "thread_id": "thr_bench"},
                headers={"Idempotent-Replayed": "true"},
            )
        sent_id = f"<sent-{len(self.keys)}@bench.instant>"
        self.keys[key] = sent_id
        now = time.time()
        if not self.first:
            self.first = now
        self.last = now
        count[0] += 1
        self.received.setdefault(replied_to, now)
        with contextlib.suppress(ValueError, AttributeError):
            self.texts.setdefault(replied_to, str(json.loads(body).get("text") or ""))
        return web.json_response({"message_id": sent_id, "thread_id": "thr_bench"})

    async def control(self, request: web.Request) -> web.StreamResponse:
        """``/_control/<what>``: ``stats``, ``received``, ``counts`` or ``texts``."""
        stats = dict(requests=self.requests, sent=len(self.keys), replayed=self.replayed)
        found = {
            "stats": {**stats, "first": self.first, "last": self.last},
            "received": self.received,
            "counts": self.counts,
            "texts": self.texts,
        }.get(request.match_info["what"])
        if found is None:
            return web.json_response({"name": "NotFoundError", "message": "not served"}, status=404)
        return web.json_response(found)


async def thread(request: web.Request) -> web.StreamResponse:
    """A thread with no message in it, or a message of its own thread, in the shapes the
    ``agentmail`` SDK parses. A restarted worker reconciles a *pending* reply by reading
    the message (for its thread) and the thread (for a reply already sent); a 404 there
    dead-lettered the reply, which the kill runs counted as never answered."""
    parts = request.raw_path.split("?", 1)[0].split("/")
    at = "2026-01-01T00:00:00Z"
    if len(parts) == 6 and parts[4] == "messages":
        return web.json_response(
            {
                "inbox_id": unquote(parts[3]),
                "thread_id": "thr_bench",
                "message_id": unquote(parts[5]),
                "labels": ["received"],
                "timestamp": at,
                "from": "customer@example.com",
                "to": [unquote(parts[3])],
                "size": 0,
                "updated_at": at,
                "created_at": at,
            }
        )
    if len(parts) != 6 or parts[4] != "threads":
        return web.json_response({"name": "NotFoundError", "message": "not served"}, status=404)
    return web.json_response(
        {
            "inbox_id": unquote(parts[3]),
            "thread_id": unquote(parts[5]),
            "labels": [],
            "timestamp": at,
            "senders": [],
            "recipients": [],
            "last_message_id": "",
            "message_count": 0,
            "size": 0,
            "updated_at": at,
            "created_at": at,
            "count": 0,
            "messages": [],
        }
    )


def routes(app: web.Application) -> None:
    """The instant mail server's routes on ``app`` (``python -m bench._servers mail``)."""
    outbox = Outbox()
    app.router.add_post("/v0/{tail:.*}", outbox.reply)
    app.router.add_get("/_control/{what}", outbox.control)
    app.router.add_get("/v0/{tail:.*}", thread)

"""A local server that speaks OpenAI's chat-completions API, for the real ``openai`` SDK.

``POST /v1/chat/completions`` answers with ``answer(messages)`` (a function the test
sets), or with the status queued in ``fail_next``; every request's body is kept. For flow
control: ``latency_s`` (each answer takes that long), ``throttle(seconds, retry_after_s)``
(every request in that window is answered 429 with ``Retry-After``), ``usage`` (the
tokens each answer reports), and ``calls`` (when each request came, monotonic, and the
status it got).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from testkit.fakes._server import FakeServer

Json = dict[str, Any]


class FakeChatModel(FakeServer):
    def __init__(self, answer: Callable[[list[Json]], str] | None = None) -> None:
        super().__init__()
        self.answer = answer or (lambda messages: "Thanks for your message.")
        self.requests: list[Json] = []
        self.fail_next: list[int] = []
        self.latency_s = 0.0
        self.usage = (10, 5)  #: prompt and completion tokens each answer reports
        #: (monotonic time, status) of every request, in arrival order
        self.calls: list[tuple[float, int]] = []
        self._throttled_until = 0.0
        self._retry_after = "1"

    def throttle(self, seconds: float, retry_after_s: float) -> None:
        """Answer every request 429 with ``Retry-After: retry_after_s`` for ``seconds``."""
        self._retry_after = f"{retry_after_s:g}"
        self._throttled_until = time.monotonic() + seconds

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        return app

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if time.monotonic() < self._throttled_until:
            self.calls.append((time.monotonic(), 429))
            error = {"message": "Rate limit reached", "type": "requests", "code": "429"}
            headers = {"Retry-After": self._retry_after}
            return web.json_response({"error": error}, status=429, headers=headers)
        self.calls.append((time.monotonic(), 200))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.fail_next:
            status = self.fail_next.pop(0)
            error = {"message": "Rate limit reached", "type": "requests", "code": str(status)}
            return web.json_response({"error": error}, status=status)
        content = self.answer(body["messages"])
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": self.usage[0],
                    "completion_tokens": self.usage[1],
                    "total_tokens": sum(self.usage),
                },
            }
        )

"""A local server that speaks OpenAI's chat-completions API, for the real ``openai`` SDK.

``POST /v1/chat/completions`` answers with ``answer(messages)`` (a function the test
sets), or with the status queued in ``fail_next``; every request's body is kept.
"""

from __future__ import annotations

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

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        return app

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
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
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

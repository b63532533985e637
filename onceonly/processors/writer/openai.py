"""A worked example: a reply writer on the ``openai`` SDK (``pip install 'onceonly[openai]'``).

Chat completions over any OpenAI-compatible server: OpenAI, vLLM, Ollama, a hosted
one. The SDK reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` itself; ``OPENAI_MODEL``
picks the model. Use it as it is::

    ONCEONLY_REPLY_WRITER=onceonly.processors.writer.openai:reply

or build your own around :class:`OpenAIWriter` (a client, a model, a system prompt).

What it shows of the writer contract: it is async; it reads the thread's history only
through ``burst.history()`` (one API call, made because it asks); it lets the SDK's
errors (429, 5xx, timeouts) propagate, so the worker retries it with backoff and
dead-letters the burst after ``ONCEONLY_WRITER_ATTEMPTS``; the SDK's own retries are
off, so a retry is the worker's and is counted; and it declines (returns None) when the
model answers with the agreed word ``NO_REPLY``. It reports each call's usage (the
response's ``usage``), which the worker records with the reply; a 429's ``Retry-After``
(on the SDK's ``RateLimitError``) pauses the worker's calls to the model for that long.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from onceonly.foundation import tracing
from onceonly.processors.writer.contract import Decline, ThreadMessage
from onceonly.processors.writer.runner import Burst

SYSTEM_PROMPT = (
    "You are a helpful support agent answering email. Reply to the customer's latest "
    "message, taking every message of this burst into account. Answer with the email's "
    "text only. If the message needs no answer (an auto-reply, a thank-you), answer with "
    "exactly NO_REPLY."
)
NO_REPLY = "NO_REPLY"


def prompt(burst: Sequence[Any], history: Sequence[ThreadMessage]) -> list[dict[str, str]]:
    """The chat messages for a burst: the system prompt, the thread so far, the new mail."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for earlier in history:
        role = "assistant" if earlier.own else "user"
        messages.append({"role": role, "content": earlier.text or ""})
    for message in burst:
        subject = f"Subject: {message.subject}\n\n" if message.subject else ""
        messages.append({"role": "user", "content": f"{subject}{message.text or ''}"})
    return messages


class OpenAIWriter:
    """An async reply writer over an ``openai.AsyncOpenAI`` client."""

    def __init__(self, client: Any, *, model: str, temperature: float = 0.2) -> None:
        self.client = client
        self.model = model
        self.temperature = temperature

    async def __call__(self, burst: Burst) -> str | Decline:
        history = await burst.history()
        completion = await self.client.chat.completions.create(
            model=self.model,
            messages=prompt(burst, history),
            temperature=self.temperature,
        )
        usage = getattr(completion, "usage", None)  # the GenAI attributes of the writer's span
        tracing.report_model_call(
            model=self.model,
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            response_model=getattr(completion, "model", None),
        )
        if usage is not None:  # what the call cost: in the ledger, the metrics, the TPM budget
            burst.report_usage(
                getattr(completion, "model", None) or self.model,
                usage.prompt_tokens or 0,
                usage.completion_tokens or 0,
            )
        text = (completion.choices[0].message.content or "").strip()
        if not text or text == NO_REPLY:
            return Decline("the model chose not to reply")
        return text


_default: OpenAIWriter | None = None


async def reply(burst: Burst) -> str | Decline:
    """``ONCEONLY_REPLY_WRITER=onceonly.processors.writer.openai:reply``: the client is
    built once."""
    global _default
    if _default is None:
        from openai import AsyncOpenAI

        _default = OpenAIWriter(
            AsyncOpenAI(max_retries=0), model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        )
    return await _default(burst)

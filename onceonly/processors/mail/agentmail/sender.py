"""AgentMail's sender through its SDK: replies with our key; the SDK's errors are mapped
to ours here and nowhere else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
import structlog
from agentmail import AgentMailEnvironment, AsyncAgentMail
from agentmail.core.api_error import ApiError

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.agentmail.listing import list_messages
from onceonly.processors.mail.agentmail.messages import find_sent_reply
from onceonly.processors.mail.agentmail.transport import ApiClient
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.mail")


def _path_id(value: str) -> str:
    """The SDK puts ids in the URL path unescaped; a Message-ID may hold ``/`` or ``?``."""
    return quote(value, safe="")


def classify(exc: Exception) -> SendError:
    """The one seam where the SDK's and httpx's errors become our send policy."""
    if isinstance(exc, httpx.HTTPError):  # timeouts, refused or dropped connections
        return SendError(SendFailure.RETRY, f"mail API unreachable: {exc!r}")
    if isinstance(exc, ApiError):
        status = exc.status_code or 0
        body = exc.body
        name = ""
        if isinstance(body, dict):
            name = str(body.get("name") or body.get("code") or "")
        elif body is not None:
            name = str(getattr(body, "name", "") or getattr(body, "code", "") or "")
        if status == 409:
            if "flight" in name.lower() or "progress" in name.lower():
                return SendError(
                    SendFailure.IN_FLIGHT, "409: the first send is in flight", status=409
                )
            return SendError(
                SendFailure.CONFLICT,
                f"409 {name or 'conflict'}: the key was used with different content; "
                "this is a bug, not a retry: inspect the dead letter",
                status=409,
            )
        if status == 429 or status >= 500 or status == 408:
            return SendError(SendFailure.RETRY, f"mail API answered {status}", status=status)
        return SendError(SendFailure.REJECTED, f"mail API refused the send: {status} {name}")
    raise exc


def agentmail_client(
    api_key: str,
    *,
    base_url: str | None = None,
    timeout_s: float = 10.0,
    http: httpx.AsyncClient | None = None,
) -> AsyncAgentMail:
    """The SDK's client for the API at ``base_url`` (production if None), over aiohttp."""
    env = (
        AgentMailEnvironment(http=base_url, websockets=base_url.replace("http", "ws", 1))
        if base_url
        else AgentMailEnvironment.PROD
    )
    return AsyncAgentMail(
        api_key=api_key,
        environment=env,
        timeout=timeout_s,
        httpx_client=http or ApiClient(timeout_s=timeout_s),
    )


class AgentMailSender:
    """Replies through ``inboxes.messages.reply`` with our key and the SDK's retries off."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        timeout_s: float = 10.0,
        client: AsyncAgentMail | None = None,
    ) -> None:
        self._http: httpx.AsyncClient | None = None
        if client is None:
            self._http = ApiClient(timeout_s=timeout_s)
            client = agentmail_client(
                api_key, base_url=base_url, timeout_s=timeout_s, http=self._http
            )
        self.client = client
        self.timeout_s = timeout_s

    @property
    def dry_run(self) -> bool:
        return False

    async def aclose(self) -> None:
        """Close the HTTP connections this sender opened (not those of a client given to it)."""
        if self._http is not None:
            await self._http.aclose()

    @property
    def _options(self) -> Any:
        return {"max_retries": 0, "timeout_in_seconds": self.timeout_s}

    async def reply(self, record: ReplyRecord) -> str:
        try:
            sent = await self.client.inboxes.messages.reply(
                _path_id(record.inbox_id),
                _path_id(record.message_id),
                text=record.reply_text,
                idempotency_key=record.key,
                request_options=self._options,
            )
        except (ApiError, httpx.HTTPError) as exc:
            raise classify(exc) from exc
        return str(sent.message_id)

    async def find_reply(self, record: ReplyRecord) -> str | None:
        try:
            message = await self.client.inboxes.messages.get(
                _path_id(record.inbox_id),
                _path_id(record.message_id),
                request_options=self._options,
            )
            thread = await self.client.inboxes.threads.get(
                _path_id(record.inbox_id),
                _path_id(message.thread_id),
                request_options=self._options,
            )
        except (ApiError, httpx.HTTPError) as exc:
            raise classify(exc) from exc
        messages = [m.model_dump(by_alias=True) for m in thread.messages or []]
        return find_sent_reply(messages, record.message_id)

    async def thread(self, inbox_id: str, thread_id: str) -> list[dict[str, Any]]:
        """The thread's messages (the agent's own replies included), oldest first."""
        try:
            thread = await self.client.inboxes.threads.get(
                _path_id(inbox_id), _path_id(thread_id), request_options=self._options
            )
        except (ApiError, httpx.HTTPError) as exc:
            raise classify(exc) from exc
        return [m.model_dump(by_alias=True, mode="json") for m in thread.messages or []]

    async def fetch(self, inbox_id: str, message_id: str) -> dict[str, Any]:
        """The whole message, for events whose bodies were left out."""
        try:
            message = await self.client.inboxes.messages.get(
                _path_id(inbox_id), _path_id(message_id), request_options=self._options
            )
        except (ApiError, httpx.HTTPError) as exc:
            raise classify(exc) from exc
        return dict(message.model_dump(by_alias=True, mode="json"))

    async def messages_since(self, inbox_id: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        """Every message of the inbox after ``since``, oldest first (catch-up)."""
        try:
            async for message in list_messages(self.client, inbox_id, since):
                yield message
        except (ApiError, httpx.HTTPError) as exc:
            raise classify(exc) from exc

    async def address(self, inbox_id: str) -> str | None:
        return inbox_id  # an AgentMail inbox id is its address

    async def webhook_enabled(self, webhook_id: str) -> bool | None:
        """AgentMail turns a webhook off after about five days of failed deliveries."""
        webhook = await self.client.webhooks.get(webhook_id)
        return bool(webhook.enabled)

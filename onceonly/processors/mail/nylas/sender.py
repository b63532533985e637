"""Nylas's sender through its SDK: replies with the Idempotency-Key, reconcile, listing.

The channel turns a Nylas ``message.created`` notification (``.truncated`` ones fetched
by id first) into an :class:`~onceonly.processors.reply.once.Inbound`; the worker then runs the same
reply-once path as for AgentMail, with the same ledger, burst rule and dead letters.

The sender calls the ``nylas`` SDK (6.x, synchronous: run in a thread) and maps its
errors to :class:`~onceonly.processors.exceptions.SendError` in :func:`classify`, and nowhere
else. A send carries the ledger's key as its ``Idempotency-Key`` header (scoped per
grant, at most 256 characters). Nylas keeps a key for 1 hour after the first request:
a pending ledger record older than that is reconciled against the thread before
anything is sent (:meth:`NylasSender.find_reply`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from onceonly.foundation.retries import retried
from onceonly.foundation.settings import NYLAS_US_API_URI
from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.nylas.errors import classify
from onceonly.processors.mail.nylas.messages import (
    IDEMPOTENCY_HEADER,
    MAX_KEY_LENGTH,
    RECONCILE_LOOKUPS,
    find_nylas_reply,
    is_replay,
    reply_subject,
    sender_of,
)
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.nylas")

#: the US region; ``ONCEONLY_NYLAS_API_URI`` points elsewhere (EU, a local server)
DEFAULT_API_URI = NYLAS_US_API_URI
#: reads (not sends) are retried this often on retryable failures
READ_ATTEMPTS = 3
#: the webhook statuses Nylas still delivers in (``failed`` and ``pause`` do not)
DELIVERING = frozenset({"active", "failing"})


# -- pure helpers --------------------------------------------------------------------


def replay_counter(registry: CollectorRegistry | None) -> Counter | None:
    if registry is None:
        return None
    return Counter(
        "onceonly_nylas_replays",
        "Nylas sends answered from its idempotency cache (Idempotent-Response: true).",
        registry=registry,
    )


# -- the sender ----------------------------------------------------------------------

#: the reply's ``to`` and ``subject``
ReplyFields = tuple[list[dict[str, str]], str]


class NylasSender:
    """Replies through ``messages.send`` with the ledger's key as ``Idempotency-Key``."""

    def __init__(
        self,
        api_key: str,
        *,
        api_uri: str = DEFAULT_API_URI,
        timeout_s: float = 10.0,
        own_address: str | None = None,
        client: Any = None,
        replays: Counter | None = None,
    ) -> None:
        if client is None:  # the SDK imported here, not with the module (errors.py: 0.5 s)
            from nylas import Client  # type: ignore[import-untyped]

            client = Client(api_key, api_uri=api_uri.rstrip("/"), timeout=timeout_s)
        self.client = client
        self.own_address = own_address
        self.replays = replays
        self.replay_count = 0
        self._addresses: dict[str, str | None] = {}
        #: (grant, message) -> (to, subject) of the reply, from the event or a fetch
        self._reply_fields: OrderedDict[tuple[str, str], ReplyFields] = OrderedDict()

    @property
    def dry_run(self) -> bool:
        return False

    async def aclose(self) -> None:
        """The SDK's client (requests, run in threads) holds no connection to close."""

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            raise classify(exc) from exc

    async def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A read, retried briefly on retryable failures (reads have no effect)."""
        return await retried(
            lambda: AsyncRetrying(
                stop=stop_after_attempt(READ_ATTEMPTS),
                wait=wait_random_exponential(multiplier=0.2, max=2.0),
                retry=retry_if_exception(lambda e: isinstance(e, SendError) and e.retryable),
                reraise=True,
            ),
            lambda: self._call(fn, *args, **kwargs),
        )

    def remember(self, grant_id: str, message: Mapping[str, Any]) -> ReplyFields:
        """Keep who a reply to this message goes to, and its subject.

        The address alone, without the display name: a resend after a restart builds the
        payload from a fetched message, and it must be byte for byte the first one's, or
        Nylas refuses the key (``api.invalid_idempotent_request``).
        """
        email = sender_of(message).strip()
        if not email:
            raise SendError(SendFailure.REJECTED, "the message has no sender to reply to")
        fields = ([{"email": email}], reply_subject(message.get("subject")))
        key = (grant_id, str(message.get("id") or ""))
        self._reply_fields[key] = fields
        self._reply_fields.move_to_end(key)
        while len(self._reply_fields) > 1024:
            self._reply_fields.popitem(last=False)
        return fields

    async def reply(self, record: ReplyRecord) -> str:
        if not record.reply_text:
            raise SendError(SendFailure.REJECTED, "the ledger record holds no reply text")
        if len(record.key) > MAX_KEY_LENGTH:
            raise SendError(SendFailure.REJECTED, f"key longer than {MAX_KEY_LENGTH} characters")
        fields = self._reply_fields.get((record.inbox_id, record.message_id))
        if fields is None:
            fields = self.remember(
                record.inbox_id, await self.fetch(record.inbox_id, record.message_id)
            )
        to, subject = fields
        request = {
            "reply_to_message_id": record.message_id,
            "to": to,
            "subject": subject,
            "body": record.reply_text,
        }
        response = await self._call(
            self.client.messages.send,
            record.inbox_id,
            request,
            overrides={"headers": {IDEMPOTENCY_HEADER: record.key}},
        )
        sent_id = str(response.data.id)
        if is_replay(response.headers):
            self.replay_count += 1
            if self.replays is not None:
                self.replays.inc()
            log.info(
                "Nylas answered from its idempotency cache: a replay, not a new send",
                key=record.key,
                grant_id=record.inbox_id,
                message_id=record.message_id,
                sent=sent_id,
            )
        return sent_id

    async def fetch(
        self, grant_id: str, message_id: str, *, headers: bool = False
    ) -> dict[str, Any]:
        """The whole message (``headers``: with its MIME headers)."""
        params = {"fields": "include_headers"} if headers else None
        response = await self._read(self.client.messages.find, grant_id, message_id, params)
        return dict(response.data.to_dict())

    async def address(self, grant_id: str) -> str | None:
        """The grant's own address: configured, or read from the grant (once)."""
        if self.own_address:
            return self.own_address
        if grant_id not in self._addresses:
            response = await self._read(self.client.grants.find, grant_id)
            email = getattr(response.data, "email", None)
            self._addresses[grant_id] = str(email) if email else None
        return self._addresses[grant_id]

    async def webhook_enabled(self, webhook_id: str) -> bool | None:
        """Nylas delivers to a webhook ``active`` or ``failing``; ``failed`` or ``pause``
        is off."""
        response = await self._read(self.client.webhooks.find, webhook_id)
        return str(response.data.status) in DELIVERING

    async def find_reply(self, record: ReplyRecord) -> str | None:
        """The grant's reply to ``record.message_id`` in its thread, if it is there.

        A message or thread Nylas no longer has (4xx) counts as no reply: the send that
        follows meets the same answer and is dead-lettered. Nylas out of reach (after a
        few tries) raises: nothing may be sent before the thread has been read.
        """
        try:
            original = await self.fetch(record.inbox_id, record.message_id, headers=True)
            thread_id = original.get("thread_id")
            if not thread_id:
                return None
            thread = await self._read(self.client.threads.find, record.inbox_id, str(thread_id))
        except SendError as exc:
            if exc.retryable:
                raise
            log.warning("reconcile: the message or thread is gone", key=record.key, error=str(exc))
            return None
        ids = [i for i in thread.data.message_ids or () if i != record.message_id]
        own = await self.address(record.inbox_id)
        for message_id in reversed(ids[-RECONCILE_LOOKUPS:]):  # the newest first
            try:
                candidate = await self.fetch(record.inbox_id, message_id, headers=True)
            except SendError as exc:
                if exc.retryable:
                    raise
                continue  # deleted since the thread was read
            found = find_nylas_reply([candidate], original, own)
            if found is not None:
                return found
        return None

    async def thread(self, grant_id: str, thread_id: str) -> list[dict[str, Any]]:
        """The thread's messages, oldest first (the newest ``RECONCILE_LOOKUPS`` of them)."""
        thread = await self._read(self.client.threads.find, grant_id, thread_id)
        ids = list(thread.data.message_ids or ())[-RECONCILE_LOOKUPS:]
        return [await self.fetch(grant_id, message_id) for message_id in ids]

    async def messages_since(self, grant_id: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        """Every message the grant received at or after ``since``, oldest first: Nylas lists
        newest first, so every page is read before the first message is yielded (a thread's
        older message must reach the worker first, whatever its reorder window)."""
        listed = [message async for message in self._pages_since(grant_id, since)]
        listed.sort(key=lambda message: (message.get("date") or 0, message.get("id") or ""))
        for message in listed:
            yield message

    async def _pages_since(self, grant_id: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "received_after": int(since.timestamp()) - 1,  # Nylas' bound is exclusive
                "limit": 200,
            }
            if token:
                params["page_token"] = token
            page = await self._read(self.client.messages.list, grant_id, params)
            for message in page.data or ():
                yield dict(message.to_dict())
            token = page.next_cursor
            if not token:
                return

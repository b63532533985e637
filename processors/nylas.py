"""Nylas as a mail channel: which notifications to answer, and replies through the SDK.

The channel turns a Nylas ``message.created`` notification (``.truncated`` ones fetched
by id first) into an :class:`~processors.reply.Inbound`; the worker then runs the same
reply-once path as for AgentMail, with the same ledger, burst rule and dead letters.

The sender calls the ``nylas`` SDK (6.x, synchronous: run in a thread) and maps its
errors to :class:`~processors.exceptions.SendError` in :func:`classify`, and nowhere
else. A send carries the ledger's key as its ``Idempotency-Key`` header (scoped per
grant, at most 256 characters). Nylas keeps a key for 1 hour after the first request:
a pending ledger record older than that is reconciled against the thread before
anything is sent (:meth:`NylasSender.find_reply`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parseaddr
from typing import Any

import requests
import structlog
from nylas import Client  # type: ignore[import-untyped]
from nylas.models.errors import (  # type: ignore[import-untyped]
    AbstractNylasApiError,
    AbstractNylasSdkError,
    NylasApiError,
    NylasSdkTimeoutError,
)
from prometheus_client import CollectorRegistry, Counter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from processors.exceptions import SendError, SendFailure
from processors.messages import ThreadMessage
from processors.reply import Inbound, Skip
from schemas.envelope import Envelope
from schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.nylas")

#: Nylas keeps an Idempotency-Key for 1 hour after the first request.
NYLAS_KEY_LIFETIME = timedelta(hours=1)
#: the US region; ``ONCEONLY_NYLAS_API_URI`` points elsewhere (EU, a local server)
DEFAULT_API_URI = "https://api.us.nylas.com"
#: the notification types that carry a new message to answer
ANSWERABLE = frozenset({"message.created", "message.created.truncated"})
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Response"
MAX_KEY_LENGTH = 256
#: how many of a thread's messages the reconcile step reads at most (the newest)
RECONCILE_LOOKUPS = 50
#: reads (not sends) are retried this often on retryable failures
READ_ATTEMPTS = 3


# -- pure helpers --------------------------------------------------------------------


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _first_address(participants: Any) -> tuple[str, str]:
    """(name, email) of the first entry of a Nylas participant list, or ("", "")."""
    if isinstance(participants, list) and participants:
        first = participants[0]
        if isinstance(first, Mapping):
            return str(first.get("name") or ""), str(first.get("email") or "")
        if isinstance(first, str):
            name, email = parseaddr(first)
            return name, email or first
    return "", ""


def sender_of(message: Mapping[str, Any]) -> str:
    """The sender's address (``from[0].email``), or ""."""
    return _first_address(message.get("from") or message.get("from_"))[1]


def reply_subject(subject: str | None) -> str:
    """``Re: <subject>``, without stacking ``Re:`` prefixes."""
    text = (subject or "").strip()
    return text if text.lower().startswith("re:") else f"Re: {text}".rstrip()


def own_message(message: Mapping[str, Any], own_address: str | None) -> bool:
    """True for the grant's own mail: sent from its address, or filed in SENT."""
    folders = {str(f).upper() for f in message.get("folders") or ()}
    sender = sender_of(message).strip().lower()
    return "SENT" in folders or bool(own_address and sender == own_address.strip().lower())


def header(message: Mapping[str, Any], name: str) -> str | None:
    """A header's value from a message fetched with ``fields=include_headers``."""
    for item in message.get("headers") or ():
        if isinstance(item, Mapping) and str(item.get("name", "")).lower() == name.lower():
            return str(item.get("value", "")).strip()
    return None


def find_nylas_reply(
    candidates: Iterable[Mapping[str, Any]], original: Mapping[str, Any], own_address: str | None
) -> str | None:
    """The id of the grant's own message that replies to ``original``, if one is here.

    A reply is the grant's own mail whose ``In-Reply-To`` is the original's
    ``Message-ID`` (both read with ``fields=include_headers``). Without a ``Message-ID``
    on the original, any of the grant's own messages dated at or after it counts.
    """
    wanted = header(original, "Message-ID")
    since = int(original.get("date") or 0)
    for message in candidates:
        if message.get("id") == original.get("id") or not own_message(message, own_address):
            continue
        if wanted:
            if header(message, "In-Reply-To") == wanted:
                return str(message["id"])
        elif int(message.get("date") or 0) >= since:
            return str(message["id"])
    return None


def inbound_from_nylas(
    message: Mapping[str, Any], *, thread_key: str, event_id: str, fallback_time: datetime
) -> Inbound:
    """A Nylas message object (a notification's ``data.object`` or a fetched message)."""
    when = fallback_time
    date = message.get("date")
    if isinstance(date, int | float) and not isinstance(date, bool) and date > 0:
        when = datetime.fromtimestamp(date, tz=UTC)
    text = message.get("body") or message.get("snippet")
    return Inbound(
        inbox_id=str(message.get("grant_id") or ""),
        message_id=str(message.get("id") or ""),
        thread_key=thread_key,
        thread_id=str(message.get("thread_id") or ""),
        event_id=event_id,
        occurred_at=when,
        sender=sender_of(message),
        subject=message.get("subject"),
        text=str(text) if text is not None else None,
        labels=tuple(str(f) for f in message.get("folders") or ()),
    )


def is_replay(headers: Mapping[str, str] | None) -> bool:
    """``Idempotent-Response: true``: Nylas answered from its cache, nothing was sent."""
    if not headers:
        return False
    value = headers.get(REPLAY_HEADER)
    if value is None:  # a plain dict: compare names case-insensitively
        value = next((v for k, v in headers.items() if k.lower() == REPLAY_HEADER.lower()), None)
    return str(value or "").strip().lower() == "true"


def classify(exc: BaseException) -> SendError:
    """The one seam where the SDK's and requests' errors become our send policy."""
    if isinstance(exc, NylasSdkTimeoutError):
        return SendError(SendFailure.RETRY, f"Nylas did not answer in time: {exc}")
    if isinstance(exc, NylasApiError):
        status = int(exc.status_code or 0)
        kind = str(getattr(exc, "type", "") or "")
        if kind == "api.invalid_idempotent_request":
            return SendError(
                SendFailure.CONFLICT,
                f"409 {kind}: the key was used with a different payload; "
                "this is a bug, not a retry: inspect the dead letter",
                status=409,
            )
        if kind == "api.concurrent_idempotent_request":
            return SendError(
                SendFailure.RETRY, f"409 {kind}: the first send is in flight", status=409
            )
        if kind == "api.invalid_idempotency_key":
            return SendError(
                SendFailure.REJECTED,
                f"400 {kind}: the key is not one Nylas takes (a bug)",
                status=400,
            )
        if status == 409:
            return SendError(SendFailure.CONFLICT, f"409 {kind or 'conflict'}: {exc}", status=409)
        if status in (408, 429) or status >= 500:
            if is_replay(exc.headers):
                return SendError(
                    SendFailure.REJECTED,
                    f"Nylas replayed the first attempt's {status} from its idempotency cache; "
                    "the key answers the same for up to 1 h: retry the dead letter after that",
                    status=status,
                )
            return SendError(SendFailure.RETRY, f"Nylas answered {status} {kind}", status=status)
        return SendError(
            SendFailure.REJECTED, f"Nylas refused: {status} {kind}: {exc}", status=status
        )
    if isinstance(exc, AbstractNylasApiError):
        return SendError(SendFailure.REJECTED, f"Nylas refused: {exc}", status=exc.status_code)
    if isinstance(exc, requests.RequestException | AbstractNylasSdkError):
        return SendError(SendFailure.RETRY, f"Nylas unreachable: {exc!r}")
    if isinstance(exc, KeyError | TypeError | ValueError):  # an answer the SDK cannot read
        return SendError(SendFailure.RETRY, f"Nylas' answer could not be read: {exc!r}")
    raise exc


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
        self.client = client or Client(api_key, api_uri=api_uri.rstrip("/"), timeout=timeout_s)
        self.own_address = own_address
        self.replays = replays
        self.replay_count = 0
        self._addresses: dict[str, str | None] = {}
        #: (grant, message) -> (to, subject) of the reply, from the event or a fetch
        self._reply_fields: OrderedDict[tuple[str, str], ReplyFields] = OrderedDict()

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            raise classify(exc) from exc

    async def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A read, retried briefly on retryable failures (reads have no effect)."""
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(READ_ATTEMPTS),
            wait=wait_random_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception(
                lambda e: isinstance(e, SendError) and e.failure is SendFailure.RETRY
            ),
            reraise=True,
        ):
            with attempt:
                return await self._call(fn, *args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover

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

    async def grant_address(self, grant_id: str) -> str | None:
        """The grant's own address: configured, or read from the grant (once)."""
        if self.own_address:
            return self.own_address
        if grant_id not in self._addresses:
            response = await self._read(self.client.grants.find, grant_id)
            email = getattr(response.data, "email", None)
            self._addresses[grant_id] = str(email) if email else None
        return self._addresses[grant_id]

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
            if exc.failure is SendFailure.RETRY:
                raise
            log.warning("reconcile: the message or thread is gone", key=record.key, error=str(exc))
            return None
        ids = [i for i in thread.data.message_ids or () if i != record.message_id]
        own = await self.grant_address(record.inbox_id)
        for message_id in reversed(ids[-RECONCILE_LOOKUPS:]):  # the newest first
            try:
                candidate = await self.fetch(record.inbox_id, message_id, headers=True)
            except SendError as exc:
                if exc.failure is SendFailure.RETRY:
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

    async def messages_after(self, grant_id: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        """Every message the grant received at or after ``since``, page by page."""
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


# -- the channel ---------------------------------------------------------------------


@dataclass
class NylasChannel:
    sender: Any  #: NylasSender or DryRunOutbox: reply, find_reply, fetch
    own_address: str | None = None  #: configured; else the sender reads it from the grant
    name: str = "nylas"
    key_lifetime: timedelta = NYLAS_KEY_LIFETIME

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        if envelope.event_type not in ANSWERABLE:
            return Skip.NOT_RECEIVED  # message.updated, opened, threads, ...: never answered
        obj = _mapping(_mapping(_mapping(envelope.payload()).get("data")).get("object"))
        grant_id = envelope.account_id or str(obj.get("grant_id") or "")
        message_id = envelope.message_id or ""
        if not grant_id or not message_id:
            return Skip.NOT_RECEIVED
        if envelope.truncated or (not sender_of(obj) and isinstance(self.sender, NylasSender)):
            obj = await self.sender.fetch(grant_id, message_id)  # the body, and who sent it
        remember = getattr(self.sender, "remember", None)
        if remember is not None and sender_of(obj):
            remember(grant_id, obj)
        lookup = getattr(self.sender, "grant_address", None)
        own = self.own_address or (await lookup(grant_id) if lookup else None)
        if own_message(obj, own):
            return Skip.OWN_MESSAGE
        return inbound_from_nylas(
            {**obj, "grant_id": grant_id, "id": message_id},
            thread_key=envelope.thread_key,
            event_id=envelope.event_id,
            fallback_time=envelope.occurred_at,
        )

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        thread = getattr(self.sender, "thread", None)
        if thread is None or not message.thread_id:
            return ()
        lookup = getattr(self.sender, "grant_address", None)
        own = self.own_address or (await lookup(message.inbox_id) if lookup else None)
        out: list[ThreadMessage] = []
        for m in await thread(message.inbox_id, message.thread_id):
            if m.get("id") == message.message_id:
                break
            when = m.get("date")
            out.append(
                ThreadMessage(
                    message_id=str(m.get("id", "")),
                    sender=sender_of(m),
                    text=m.get("body") or m.get("snippet"),
                    timestamp=(
                        datetime.fromtimestamp(when, UTC)
                        if isinstance(when, int | float) and abs(when) < 1e11
                        else None
                    ),
                    own=own_message(m, own),
                    subject=m.get("subject"),
                )
            )
        return out


def nylas_channel(
    settings: Any, *, outbox: Any = None, registry: CollectorRegistry | None = None
) -> NylasChannel | None:
    """The Nylas channel if Nylas is configured (an API key, a webhook secret or an address).

    Without ``NYLAS_API_KEY`` replies go to the dry-run ``outbox`` (AgentMail's, if given).
    """
    key = settings.nylas_api_key
    own = settings.nylas_grant_email
    if key is None and settings.nylas_webhook_secret is None and not own:
        return None
    if key is None:
        from processors.mail import DryRunOutbox

        sender = outbox or DryRunOutbox(settings.run_dir / "dry-run-outbox.jsonl")
        return NylasChannel(sender, own_address=own)
    return NylasChannel(
        NylasSender(
            key.get_secret_value(),
            api_uri=settings.nylas_api_uri,
            timeout_s=settings.send_timeout_s,
            own_address=own,
            replays=replay_counter(registry),
        ),
        own_address=own,
    )

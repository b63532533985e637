"""A local HTTP server that speaks AgentMail's v0 API the way the ``agentmail`` SDK calls it.

It is a test double for integration tests and chaos runs. It runs in-process
(:class:`FakeAgentMail`, on the test's event loop or on a background thread for the
sync SDK client) or as a separate process::

    python -m testkit.fakes.agentmail_server --port 8025

Point the real SDK at it with ``environment=fake.environment`` (an
``agentmail.AgentMailEnvironment(http=base_url, websockets=ws_url)``).

API endpoints served (paths exactly as the SDK 2.0.x builds them):

* ``POST /v0/inboxes/{inbox_id}/messages/{message_id}/reply`` with ``Idempotency-Key``
* ``GET  /v0/inboxes/{inbox_id}/messages/{message_id}``
* ``GET  /v0/inboxes/{inbox_id}/messages`` (limit, page_token, labels, before, after,
  ascending, include_spam/blocked/unauthenticated/trash, from, to, subject)
* ``GET  /v0/inboxes/{inbox_id}/threads/{thread_id}`` (limit, page_token)
* ``GET  /v0/webhooks/{webhook_id}``

Idempotency (scope: the whole fake, like one organization). A key is bound to a
fingerprint of (endpoint, inbox_id, message_id, request body with null fields
dropped, canonical JSON). Same key and fingerprint after completion: the stored
response is replayed (HTTP 200, same ``message_id``, header ``Idempotent-Replayed:
true``) and nothing is sent. Same key, other fingerprint: HTTP 409
``{"name": "IdempotencyConflict", "code": "idempotency_conflict", ...}``. Same key
and fingerprint while the first call is still running: HTTP 409
``{"name": "IdempotencyInFlight", "code": "idempotency_in_progress", ...}``. The SDK
documents the conflict 409 but not the in-flight case or the error ``name``; both
bodies here are this fake's choice. A request that fails before sending (404,
injected ``fail_next``) releases its key. Keys expire ``key_ttl_s`` after the send
completes (SDK docstring: "Keys expire 24 hours after the send completes"),
measured by the injectable clock.

Choices where the real API's behaviour is not documented: ``after`` is inclusive
(``timestamp >= after``), ``before`` is exclusive; ``labels`` keeps messages carrying
every given label; page tokens are opaque cursors stable under concurrent inserts.

Fault injection (per fake, settable at runtime, also via ``POST /_control/faults``):
``latency_s`` before every API request is handled (the handler is not cancelled
when the client gives up, so a timed-out reply still sends), ``send_delay_s``
between reserving a key and sending, ``fail_next(n, status)`` for replies (answer
``status`` without sending), ``lose_response_next(n)`` (the next n replies that
would answer 2xx do their effect, then answer 500), ``thread_fail_next`` (the next n
thread reads answer 503), ``ignore_keys`` (the
``Idempotency-Key`` header is not looked at: every reply call that gets that far sends a
new email; for chaos runs that count what the caller prevents by itself). The switch is
also the constructor's ``ignore_idempotency_keys`` and the process's
``--ignore-idempotency-keys``; a reset goes back to the constructor's setting.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from testkit.fakes._server import Clock, FakeMailServer, MailFaults, command_line

__all__ = ["DEFAULT_KEY_TTL_S", "FakeAgentMail", "Faults", "OutboxEntry", "main"]

DEFAULT_KEY_TTL_S = 24 * 60 * 60.0
DEFAULT_LIST_LIMIT = 100
_HIDDEN_UNLESS_INCLUDED = ("spam", "blocked", "unauthenticated", "trash")

Json = dict[str, Any]


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat().replace("+00:00", "Z")


def _parse_time(value: Any) -> float:
    """Epoch seconds from a number or an ISO-8601 string (``Z`` or offset; naive = UTC)."""
    if isinstance(value, bool):
        raise ValueError(f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.strip().replace(" ", "+"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    raise ValueError(f"not a timestamp: {value!r}")


#: ``POST /_control/faults``: each number's name in the body, its field and its type
_FAULTS: dict[str, tuple[str, type[float] | type[int]]] = {
    "latency_s": ("latency_s", float),
    "send_delay_s": ("send_delay_s", float),
    "fail_next": ("fail_remaining", int),
    "fail_status": ("fail_status", int),
    "lose_response_next": ("lose_remaining", int),
    "thread_fail_next": ("thread_fail_remaining", int),
}


def _error(status: int, name: str, message: str, code: str | None = None) -> web.Response:
    body: Json = {"name": name, "message": message}
    if code is not None:
        body["code"] = code
    return web.json_response(body, status=status)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


@dataclass
class StoredMessage:
    """One message in an inbox, in the SDK's field naming (``from`` on the wire)."""

    inbox_id: str
    thread_id: str
    message_id: str
    labels: list[str]
    timestamp: float
    from_: str
    to: list[str]
    seq: int
    cc: list[str] = field(default_factory=list)
    bcc: list[str] = field(default_factory=list)
    reply_to: list[str] = field(default_factory=list)
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    extracted_text: str | None = None
    extracted_html: str | None = None
    preview: str | None = None
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len((self.text or "").encode()) + len((self.html or "").encode())

    def sort_key(self) -> tuple[float, int]:
        return (self.timestamp, self.seq)

    def to_json(self, *, full: bool = True) -> Json:
        """``Message`` JSON when ``full``, else the ``MessageItem`` of list responses."""
        out: Json = {
            "inbox_id": self.inbox_id,
            "thread_id": self.thread_id,
            "message_id": self.message_id,
            "labels": list(self.labels),
            "timestamp": _iso(self.timestamp),
            "from": self.from_,
            "to": list(self.to),
            "size": self.size,
            "updated_at": _iso(self.timestamp),
            "created_at": _iso(self.timestamp),
        }
        optional: dict[str, Any] = {
            "cc": self.cc or None,
            "bcc": self.bcc or None,
            "subject": self.subject,
            "preview": self.preview,
            "in_reply_to": self.in_reply_to,
            "references": self.references or None,
            "headers": self.headers or None,
        }
        if full:
            optional.update(
                reply_to=self.reply_to or None,
                text=self.text,
                html=self.html,
                extracted_text=self.extracted_text,
                extracted_html=self.extracted_html,
            )
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True)
class OutboxEntry:
    """One email the fake actually sent (one per successful, non-replayed reply)."""

    inbox_id: str
    replied_to_message_id: str
    text: str | None
    html: str | None
    idempotency_key: str | None
    sent_message_id: str
    thread_id: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    labels: tuple[str, ...]
    sent_at: float

    def to_json(self) -> Json:
        out = asdict(self)
        for name in ("to", "cc", "labels"):
            out[name] = list(out[name])
        return out


@dataclass
class Faults(MailFaults):
    #: the Idempotency-Key header is ignored: no replay, no 409, every call sends
    ignore_keys: bool = False
    #: thread reads (``GET .../threads/{id}``) still to answer 503, the thread not read
    thread_fail_remaining: int = 0


@dataclass
class _KeyRecord:
    fingerprint: str
    in_flight: bool
    response: Json | None = None
    expires_at: float | None = None


@dataclass
class _Webhook:
    webhook_id: str
    url: str
    enabled: bool
    created_at: float
    updated_at: float
    secret: str = "whsec_fake"
    event_types: list[str] = field(default_factory=lambda: ["message.received"])
    inbox_ids: list[str] = field(default_factory=list)

    def to_json(self) -> Json:
        out: Json = {
            "webhook_id": self.webhook_id,
            "url": self.url,
            "event_types": list(self.event_types),
            "secret": self.secret,
            "enabled": self.enabled,
            "updated_at": _iso(self.updated_at),
            "created_at": _iso(self.created_at),
        }
        if self.inbox_ids:
            out["inbox_ids"] = list(self.inbox_ids)
        return out


class _BadRequest(Exception):
    pass


class FakeAgentMail(FakeMailServer[Faults]):
    """In-memory AgentMail v0 API over aiohttp, with fault injection and a control API.

    ``clock`` returns epoch seconds; it drives message timestamps and key expiry.
    :meth:`advance_clock` (and ``POST /_control/clock``) adds an offset on top of it.
    """

    name = "fake AgentMail"
    _messages: dict[str, list[StoredMessage]]
    _outbox: list[OutboxEntry]
    _keys: dict[str, _KeyRecord]

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        ignore_idempotency_keys: bool = False,
    ) -> None:
        super().__init__(Faults(ignore_keys=ignore_idempotency_keys), clock, key_ttl_s)
        self._ignore_keys_default = ignore_idempotency_keys
        self._webhooks: dict[str, _Webhook] = {}

    @property
    def ws_url(self) -> str:
        return "ws" + self.base_url.removeprefix("http")

    @property
    def environment(self) -> Any:
        """``agentmail.AgentMailEnvironment`` pointing at this fake."""
        from agentmail import AgentMailEnvironment

        return AgentMailEnvironment(http=self.base_url, websockets=self.ws_url)

    # ----------------------------------------------------------------- state API

    def seed_message(
        self,
        inbox_id: str,
        *,
        message_id: str | None = None,
        thread_id: str | None = None,
        from_: str = "sender@example.com",
        to: Sequence[str] | None = None,
        cc: Sequence[str] = (),
        subject: str | None = "Hello",
        text: str | None = "Hello there",
        html: str | None = None,
        extracted_text: str | None = None,
        labels: Sequence[str] = ("received",),
        timestamp: float | str | None = None,
        in_reply_to: str | None = None,
        references: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
    ) -> Json:
        """Add a message to an inbox and return its full ``Message`` JSON.

        Received mail: labels ``["received"]`` (default). Agent-sent mail: pass
        ``labels=["sent"]`` and ``in_reply_to``. ``thread_id`` defaults to the thread of
        ``in_reply_to`` if that message is known, else a new thread.
        """
        with self._lock:
            if thread_id is None and in_reply_to is not None:
                parent = self._find(inbox_id, in_reply_to)
                thread_id = parent.thread_id if parent is not None else None
            msg = StoredMessage(
                inbox_id=inbox_id,
                thread_id=thread_id or str(uuid.uuid4()),
                message_id=message_id or self._new_message_id(),
                labels=list(labels),
                timestamp=self.now() if timestamp is None else _parse_time(timestamp),
                from_=from_,
                to=list(to) if to is not None else [inbox_id],
                cc=list(cc),
                subject=subject,
                text=text,
                html=html,
                extracted_text=extracted_text if extracted_text is not None else text,
                preview=(text or "")[:100] or None,
                in_reply_to=in_reply_to,
                references=list(references),
                headers=dict(headers or {}),
                seq=self._next_seq(),
            )
            if self._find(inbox_id, msg.message_id) is not None:
                raise ValueError(f"message {msg.message_id!r} already exists in {inbox_id!r}")
            self._messages.setdefault(inbox_id, []).append(msg)
            return msg.to_json()

    def seed_webhook(
        self,
        webhook_id: str,
        *,
        url: str = "http://127.0.0.1:9/webhooks/agentmail",
        enabled: bool = True,
        event_types: Sequence[str] = ("message.received",),
        inbox_ids: Sequence[str] = (),
    ) -> Json:
        with self._lock:
            now = self.now()
            hook = _Webhook(
                webhook_id=webhook_id,
                url=url,
                enabled=enabled,
                created_at=now,
                updated_at=now,
                event_types=list(event_types),
                inbox_ids=list(inbox_ids),
            )
            self._webhooks[webhook_id] = hook
            return hook.to_json()

    def set_webhook_enabled(self, webhook_id: str, enabled: bool) -> Json:
        """Flip a webhook's ``enabled`` flag (creating the webhook if unknown)."""
        with self._lock:
            hook = self._webhooks.get(webhook_id)
            if hook is None:
                return self.seed_webhook(webhook_id, enabled=enabled)
            hook.enabled = enabled
            hook.updated_at = self.now()
            return hook.to_json()

    def messages(self, inbox_id: str) -> list[Json]:
        """All messages of an inbox, oldest first, as full ``Message`` JSON."""
        with self._lock:
            msgs = sorted(self._messages.get(inbox_id, []), key=StoredMessage.sort_key)
            return [m.to_json() for m in msgs]

    def keys_in_flight(self) -> list[str]:
        """The idempotency keys whose first reply call is still running."""
        with self._lock:
            return [key for key, record in self._keys.items() if record.in_flight]

    def ignore_keys(self, ignore: bool = True) -> None:
        """Ignore (or honour again) the Idempotency-Key header of reply calls."""
        with self._lock:
            self.faults.ignore_keys = ignore

    def reset(self) -> None:
        """Forget messages, outbox, keys, webhooks, faults, counters and clock offset."""
        with self._lock:
            self._webhooks.clear()
            self._restart(Faults(ignore_keys=self._ignore_keys_default))

    # ----------------------------------------------------------------- internals

    @staticmethod
    def _new_message_id() -> str:
        return f"<{uuid.uuid4().hex}@fake.agentmail.local>"

    def _find(self, inbox_id: str, message_id: str) -> StoredMessage | None:
        for msg in self._messages.get(inbox_id, []):
            if msg.message_id == message_id:
                return msg
        return None

    # ----------------------------------------------------------------- aiohttp app

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/v0/{tail:.*}", self._api)
        app.router.add_post("/_control/seed", self._c_seed)
        app.router.add_get("/_control/faults", self._c_get_faults)
        app.router.add_post("/_control/faults", self._c_set_faults)
        app.router.add_get("/_control/outbox", self._c_outbox)
        app.router.add_get("/_control/messages", self._c_messages)
        app.router.add_get("/_control/stats", self._c_stats)
        app.router.add_post("/_control/reset", self._c_reset)
        app.router.add_post("/_control/webhook-enabled", self._c_webhook_enabled)
        app.router.add_post("/_control/clock", self._c_clock)
        app.router.add_get("/_control/health", self._c_health)
        return app

    async def _api(self, request: web.Request) -> web.StreamResponse:
        raw_path, parts, raw_body = await self._arrive(request)
        method = request.method
        try:
            match parts:
                case ["inboxes", inbox_id, "messages"] if method == "GET":
                    self._count("list_messages")
                    return self._list_messages(inbox_id, request.query)
                case ["inboxes", inbox_id, "messages", message_id] if method == "GET":
                    self._count("get_message")
                    return self._get_message(inbox_id, message_id)
                case ["inboxes", inbox_id, "messages", message_id, "reply"] if method == "POST":
                    self._count("reply")
                    return await self._reply(request, raw_body, inbox_id, message_id)
                case ["inboxes", inbox_id, "threads", thread_id] if method == "GET":
                    self._count("get_thread")
                    if self._thread_fails():
                        return _error(503, "ServiceUnavailableError", "thread read failed")
                    return self._get_thread(inbox_id, thread_id, request.query)
                case ["webhooks", webhook_id] if method == "GET":
                    self._count("get_webhook")
                    return self._get_webhook(webhook_id)
        except _BadRequest as exc:
            return web.json_response(
                {"name": "ValidationError", "message": str(exc), "errors": [str(exc)]},
                status=400,
            )
        self._count("unknown_route")
        return _error(404, "NotFoundError", f"Route not found: {method} {raw_path}")

    def _thread_fails(self) -> bool:
        """Whether this thread read fails (``thread_fail_remaining``, counted down)."""
        with self._lock:
            if self.faults.thread_fail_remaining <= 0:
                return False
            self.faults.thread_fail_remaining -= 1
            return True

    # GET /v0/inboxes/{inbox_id}/messages/{message_id}
    def _get_message(self, inbox_id: str, message_id: str) -> web.Response:
        with self._lock:
            msg = self._find(inbox_id, message_id)
            if msg is None:
                return _error(404, "NotFoundError", f"Message {message_id} not found")
            return web.json_response(msg.to_json())

    # GET /v0/inboxes/{inbox_id}/messages
    def _list_messages(self, inbox_id: str, query: Mapping[str, str]) -> web.Response:
        q = _Query(query)
        limit = q.get_int("limit", DEFAULT_LIST_LIMIT)
        ascending = q.get_bool("ascending", False)
        labels = q.get_list("labels")
        after = q.get_time("after")
        before = q.get_time("before")
        included = {
            name for name in _HIDDEN_UNLESS_INCLUDED if q.get_bool(f"include_{name}", False)
        }
        from_filters = q.get_list("from")
        to_filters = q.get_list("to")
        subject_filters = q.get_list("subject")

        def keep(m: StoredMessage) -> bool:
            if any(h in m.labels and h not in included for h in _HIDDEN_UNLESS_INCLUDED):
                return False
            if not all(label in m.labels for label in labels):
                return False
            if after is not None and m.timestamp < after:
                return False
            if before is not None and m.timestamp >= before:
                return False
            recipients = " ".join(m.to + m.cc + m.bcc)
            return (
                all(f in m.from_ for f in from_filters)
                and all(f in recipients for f in to_filters)
                and all(f in (m.subject or "") for f in subject_filters)
            )

        with self._lock:
            msgs = [m for m in self._messages.get(inbox_id, []) if keep(m)]
        page, next_token = _paginate(msgs, limit, ascending, q.get("page_token"))
        body: Json = {
            "count": len(page),
            "limit": limit,
            "messages": [m.to_json(full=False) for m in page],
        }
        if next_token is not None:
            body["next_page_token"] = next_token
        return web.json_response(body)

    # GET /v0/inboxes/{inbox_id}/threads/{thread_id}
    def _get_thread(self, inbox_id: str, thread_id: str, query: Mapping[str, str]) -> web.Response:
        q = _Query(query)
        with self._lock:
            msgs = [m for m in self._messages.get(inbox_id, []) if m.thread_id == thread_id]
        if not msgs:
            return _error(404, "NotFoundError", f"Thread {thread_id} not found")
        ordered = sorted(msgs, key=StoredMessage.sort_key)
        limit = q.get_int("limit", DEFAULT_LIST_LIMIT)
        # First page holds the newest messages; within a page, oldest first.
        page, next_token = _paginate(msgs, limit, False, q.get("page_token"))
        page.reverse()
        received = [m.timestamp for m in ordered if "received" in m.labels]
        sent = [m.timestamp for m in ordered if "sent" in m.labels]
        newest = ordered[-1]
        body: Json = {
            "inbox_id": inbox_id,
            "thread_id": thread_id,
            "labels": sorted({label for m in ordered for label in m.labels}),
            "timestamp": _iso(newest.timestamp),
            "senders": list(dict.fromkeys(m.from_ for m in ordered)),
            "recipients": list(dict.fromkeys(r for m in ordered for r in m.to + m.cc)),
            "last_message_id": newest.message_id,
            "message_count": len(ordered),
            "size": sum(m.size for m in ordered),
            "updated_at": _iso(newest.timestamp),
            "created_at": _iso(ordered[0].timestamp),
            "count": len(page),
            "limit": limit,
            "messages": [m.to_json() for m in page],
        }
        if received:
            body["received_timestamp"] = _iso(max(received))
        if sent:
            body["sent_timestamp"] = _iso(max(sent))
        if ordered[0].subject is not None:
            body["subject"] = ordered[0].subject
        if newest.preview is not None:
            body["preview"] = newest.preview
        if next_token is not None:
            body["next_page_token"] = next_token
        return web.json_response(body)

    # GET /v0/webhooks/{webhook_id}
    def _get_webhook(self, webhook_id: str) -> web.Response:
        with self._lock:
            hook = self._webhooks.get(webhook_id)
            if hook is None:
                return _error(404, "NotFoundError", f"Webhook {webhook_id} not found")
            return web.json_response(hook.to_json())

    # POST /v0/inboxes/{inbox_id}/messages/{message_id}/reply
    async def _reply(
        self, request: web.Request, raw_body: bytes, inbox_id: str, message_id: str
    ) -> web.Response:
        try:
            body: Any = json.loads(raw_body) if raw_body.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"request body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("request body must be a JSON object")
        sent_key = request.headers.get("Idempotency-Key") or None
        with self._lock:
            key = None if self.faults.ignore_keys else sent_key
        fingerprint = json.dumps(
            {
                "endpoint": "reply",
                "inbox_id": inbox_id,
                "message_id": message_id,
                "body": {k: v for k, v in body.items() if v is not None},
            },
            sort_keys=True,
            separators=(",", ":"),
        )

        with self._lock:
            if self.faults.fail_remaining > 0:
                self.faults.fail_remaining -= 1
                return _error(
                    self.faults.fail_status,
                    "InternalServerError",
                    "Injected failure (fail_next): nothing was sent",
                )
            if self._find(inbox_id, message_id) is None:
                return _error(404, "NotFoundError", f"Message {message_id} not found")
            if key is not None:
                record = self._live_key(key)
                if record is not None and record.fingerprint != fingerprint:
                    return _error(
                        409,
                        "IdempotencyConflict",
                        "Idempotency-Key was already used with a different request",
                        code="idempotency_conflict",
                    )
                if record is not None and record.in_flight:
                    return _error(
                        409,
                        "IdempotencyInFlight",
                        "A request with this Idempotency-Key is still in progress; retry later",
                        code="idempotency_in_progress",
                    )
                if record is not None and record.response is not None:
                    return self._answer(record.response, replayed=True)
                self._keys[key] = _KeyRecord(fingerprint=fingerprint, in_flight=True)

        response = await self._send_holding_key(
            key, lambda: self._send_reply(inbox_id, message_id, body, sent_key)
        )
        with self._lock:
            if key is not None:
                self._keys[key] = _KeyRecord(
                    fingerprint=fingerprint,
                    in_flight=False,
                    response=response,
                    expires_at=self.now() + self.key_ttl_s,
                )
        await self._answer_delay()
        with self._lock:
            return self._answer(response, replayed=False)

    def _answer(self, response: Json, *, replayed: bool) -> web.Response:
        """Called with the lock held."""
        if self.faults.lose_remaining > 0:
            self.faults.lose_remaining -= 1
            return _error(
                500,
                "InternalServerError",
                "Injected failure (lose_response_next): the request took effect",
            )
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return web.json_response(response, headers=headers)

    def _send_reply(
        self, inbox_id: str, message_id: str, body: Mapping[str, Any], key: str | None
    ) -> Json:
        """Append the sent message and the outbox entry. Called with the lock held."""
        parent = self._find(inbox_id, message_id)
        if parent is None:  # deleted while we slept
            raise web.HTTPNotFound()
        to = _as_list(body.get("to")) or (parent.reply_to or [parent.from_])
        cc = _as_list(body.get("cc"))
        if body.get("reply_all"):
            others = [a for a in parent.to + parent.cc if a != inbox_id and a not in to]
            cc = list(dict.fromkeys(cc + others))
        labels = list(dict.fromkeys(["sent", *_as_list(body.get("labels"))]))
        subject = parent.subject or ""
        text = body.get("text")
        html = body.get("html")
        sent = StoredMessage(
            inbox_id=inbox_id,
            thread_id=parent.thread_id,
            message_id=self._new_message_id(),
            labels=labels,
            timestamp=self.now(),
            from_=inbox_id,
            to=to,
            cc=cc,
            bcc=_as_list(body.get("bcc")),
            subject=subject if subject.lower().startswith("re:") else f"Re: {subject}",
            text=text if isinstance(text, str) else None,
            html=html if isinstance(html, str) else None,
            extracted_text=text if isinstance(text, str) else None,
            preview=(text[:100] or None) if isinstance(text, str) else None,
            in_reply_to=parent.message_id,
            references=[*parent.references, parent.message_id],
            headers=dict(body.get("headers") or {}),
            seq=self._next_seq(),
        )
        self._messages.setdefault(inbox_id, []).append(sent)
        self._outbox.append(
            OutboxEntry(
                inbox_id=inbox_id,
                replied_to_message_id=parent.message_id,
                text=sent.text,
                html=sent.html,
                idempotency_key=key,
                sent_message_id=sent.message_id,
                thread_id=sent.thread_id,
                to=tuple(sent.to),
                cc=tuple(sent.cc),
                labels=tuple(sent.labels),
                sent_at=sent.timestamp,
            )
        )
        return {"message_id": sent.message_id, "thread_id": sent.thread_id}

    # ----------------------------------------------------------------- control API

    async def _c_seed(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        seeded: list[Json] = []
        hooks: list[Json] = []
        try:
            for item in _items(body, "messages"):
                seeded.append(self._seed_from_json(item))
            for item in body.get("webhooks", []):
                hooks.append(
                    self.seed_webhook(
                        str(item["webhook_id"]),
                        url=str(item.get("url", "http://127.0.0.1:9/webhooks/agentmail")),
                        enabled=bool(item.get("enabled", True)),
                        event_types=_as_list(item.get("event_types")) or ["message.received"],
                        inbox_ids=_as_list(item.get("inbox_ids")),
                    )
                )
        except (KeyError, TypeError, ValueError) as exc:
            return _error(400, "ValidationError", f"bad seed: {exc!r}")
        return web.json_response({"messages": seeded, "webhooks": hooks})

    def _seed_from_json(self, item: Mapping[str, Any]) -> Json:
        labels = item.get("labels")
        return self.seed_message(
            str(item["inbox_id"]),
            message_id=item.get("message_id"),
            thread_id=item.get("thread_id"),
            from_=str(item.get("from", item.get("from_", "sender@example.com"))),
            to=_as_list(item["to"]) if "to" in item else None,
            cc=_as_list(item.get("cc")),
            subject=item.get("subject", "Hello"),
            text=item.get("text", "Hello there"),
            html=item.get("html"),
            extracted_text=item.get("extracted_text"),
            labels=_as_list(labels) if labels is not None else ("received",),
            timestamp=item.get("timestamp"),
            in_reply_to=item.get("in_reply_to"),
            references=_as_list(item.get("references")),
            headers=item.get("headers"),
        )

    async def _c_get_faults(self, request: web.Request) -> web.Response:
        with self._lock:
            return web.json_response(self.faults.to_json())

    async def _c_set_faults(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        try:
            with self._lock:
                f = self.faults
                for name, (attribute, kind) in _FAULTS.items():
                    if name in body:
                        setattr(f, attribute, kind(body[name]))
                if "ignore_keys" in body:
                    if not isinstance(body["ignore_keys"], bool):
                        raise TypeError("ignore_keys must be a boolean")
                    f.ignore_keys = body["ignore_keys"]
                return web.json_response(f.to_json())
        except (TypeError, ValueError) as exc:
            return _error(400, "ValidationError", f"bad faults: {exc!r}")

    async def _c_messages(self, request: web.Request) -> web.Response:
        inbox_id = request.query.get("inbox_id")
        if inbox_id is None:
            return _error(400, "ValidationError", "inbox_id query parameter is required")
        return web.json_response({"messages": self.messages(inbox_id)})

    async def _c_stats(self, request: web.Request) -> web.Response:
        with self._lock:
            return web.json_response(
                {
                    "requests": dict(self.request_counts),
                    "sent": len(self._outbox),
                    "idempotency_keys": len(self._keys),
                    "now": self.now(),
                    "faults": self.faults.to_json(),
                }
            )

    async def _c_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def _c_webhook_enabled(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        if "webhook_id" not in body or not isinstance(body.get("enabled"), bool):
            return _error(400, "ValidationError", "need webhook_id and boolean enabled")
        return web.json_response(self.set_webhook_enabled(str(body["webhook_id"]), body["enabled"]))

    async def _c_clock(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        try:
            now = self.advance_clock(float(body.get("advance_s", 0.0)))
        except (TypeError, ValueError) as exc:
            return _error(400, "ValidationError", f"bad advance_s: {exc!r}")
        return web.json_response({"now": now})

    async def _c_health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})


class _Query:
    """Typed access to query parameters as the SDK encodes them."""

    def __init__(self, query: Mapping[str, str]) -> None:
        self._query = query

    def get(self, name: str) -> str | None:
        return self._query.get(name)

    def get_int(self, name: str, default: int) -> int:
        value = self._query.get(name)
        try:
            return default if value is None else max(1, int(value))
        except ValueError as exc:
            raise _BadRequest(f"{name} must be an integer, got {value!r}") from exc

    def get_bool(self, name: str, default: bool) -> bool:
        value = self._query.get(name)
        return default if value is None else value.strip().lower() in ("true", "1", "yes")

    def get_time(self, name: str) -> float | None:
        value = self._query.get(name)
        if value is None:
            return None
        try:
            return _parse_time(value)
        except ValueError as exc:
            raise _BadRequest(f"{name} must be an ISO-8601 datetime, got {value!r}") from exc

    def get_list(self, name: str) -> list[str]:
        """The SDK sends a simple list as ONE JSON-array value (``labels=["a","b"]``);
        repeated keys and comma-separated values are accepted too."""
        getall = getattr(self._query, "getall", None)
        values: Iterable[str] = (
            getall(name, []) if getall is not None else _as_list(self._query.get(name))
        )
        out: list[str] = []
        for value in values:
            stripped = value.strip()
            if stripped.startswith("["):
                try:
                    out.extend(str(v) for v in json.loads(stripped))
                    continue
                except ValueError:
                    pass
            out.extend(part for part in stripped.split(",") if part)
        return out


def _paginate(
    msgs: list[StoredMessage], limit: int, ascending: bool, page_token: str | None
) -> tuple[list[StoredMessage], str | None]:
    """Order by (timestamp, seq) and cut one page after the cursor in ``page_token``."""
    ordered = sorted(msgs, key=StoredMessage.sort_key, reverse=not ascending)
    if page_token:
        try:
            cursor_json = json.loads(base64.urlsafe_b64decode(page_token.encode()))
            cursor = (float(cursor_json["ts"]), int(cursor_json["seq"]))
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise _BadRequest(f"invalid page_token {page_token!r}") from exc
        if ascending:
            ordered = [m for m in ordered if m.sort_key() > cursor]
        else:
            ordered = [m for m in ordered if m.sort_key() < cursor]
    page = ordered[:limit]
    if len(ordered) <= limit or not page:
        return page, None
    last = page[-1]
    token = base64.urlsafe_b64encode(
        json.dumps({"ts": last.timestamp, "seq": last.seq}).encode()
    ).decode()
    return page, token


async def _json_object(request: web.Request) -> Json:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    return body


def _items(body: Mapping[str, Any], plural: str) -> list[Mapping[str, Any]]:
    """``{"messages": [...]}`` or a single message object with ``inbox_id``."""
    if plural in body:
        items = body[plural]
        if not isinstance(items, list):
            raise TypeError(f"{plural} must be a list")
        return items
    return [body] if "inbox_id" in body else []


def main(argv: Sequence[str] | None = None) -> None:
    parser = command_line(
        "agentmail_server", "Fake AgentMail API for tests; prints its base URL on stdout."
    )
    parser.add_argument("--key-ttl-s", type=float, default=DEFAULT_KEY_TTL_S)
    parser.add_argument(
        "--ignore-idempotency-keys",
        action="store_true",
        help="Ignore the Idempotency-Key header: every reply call sends a new email.",
    )
    args = parser.parse_args(argv)
    fake = FakeAgentMail(
        key_ttl_s=args.key_ttl_s, ignore_idempotency_keys=args.ignore_idempotency_keys
    )
    asyncio.run(fake.serve(args.host, args.port))


if __name__ == "__main__":
    main()

"""A local HTTP server that speaks the Nylas v3 API the way the ``nylas`` SDK (6.x) calls it.

A test double for integration tests. It runs in-process (:class:`FakeNylas`, on the
test's event loop, or on a thread of its own with :meth:`FakeNylas.start_in_thread` for
worker processes) or as a process of its own::

    python -m testkit.fakes.nylas_server --port 8026

Point the real SDK at it with ``nylas.Client(api_key, api_uri=fake.base_url)`` (the
worker: ``ONCEONLY_NYLAS_API_URI``).

Endpoints (paths exactly as the SDK builds them; every answer is ``{"request_id",
"data": ...}``, lists add ``next_cursor``; errors are Nylas' shape ``{"request_id",
"error": {"type", "message"}}``):

* ``GET  /v3/grants/{grant_id}``: the grant (``email`` is the grant's own address);
* ``POST /v3/grants/{grant_id}/messages/send`` with ``Idempotency-Key`` (below);
* ``GET  /v3/grants/{grant_id}/messages/{message_id}`` (``fields=include_headers``
  adds the ``Message-ID``, ``In-Reply-To`` and ``References`` headers);
* ``GET  /v3/grants/{grant_id}/messages`` (``limit`` ≤ 200, default 50, ``page_token``,
  ``received_after`` / ``received_before`` in epoch seconds, exclusive, ``thread_id``,
  ``from``, ``in``, ``fields``), newest first;
* ``GET  /v3/grants/{grant_id}/threads/{thread_id}``.

Idempotency, as Nylas documents it (developer.nylas.com/docs/v3/email/idempotent-send):
keys are scoped per grant, at most 256 characters (else ``400
api.invalid_idempotency_key``), valid for ``key_ttl_s`` (1 h) after the *first* request,
measured by the injectable clock. A key is bound to the canonical JSON of the request
body. Same key, same body, completed: the cached status and body are answered again
with ``Idempotent-Response: true`` and nothing is sent; this holds for cached errors
too (Nylas caches the response "success or error"; ``cache_errors=False`` turns that
off). Same key, other body: ``409 api.invalid_idempotent_request``. Same key while the
first request is in flight: ``409 api.concurrent_idempotent_request``.

A sent message is filed in the grant: ``from`` is the grant's address, folder ``SENT``,
``In-Reply-To`` / ``References`` headers naming the replied-to message's
``Message-ID``, in the same thread. The fake does not deliver webhooks; tests produce
the notifications themselves.

Fault injection (settable at runtime): ``latency_s`` before every API request,
``send_delay_s`` between reserving a key and sending (the request is in flight),
``answer_delay_s`` after the send and before the answer (the email is out, the answer
is not), ``fail_next(n, status)`` (answer ``status`` without sending; cached under the
key like any error), ``lose_response_next(n)`` (the send happens, then the client gets
a 500; the key holds the success, so a retry is answered from the cache).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from testkit.fakes._server import Clock, FakeMailServer, MailFaults, command_line

__all__ = ["DEFAULT_KEY_TTL_S", "FakeNylas", "NylasFaults", "NylasOutboxEntry", "main"]

DEFAULT_KEY_TTL_S = 60 * 60.0
MAX_KEY_LENGTH = 256
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 200

Json = dict[str, Any]


def _request_id() -> str:
    return str(uuid.uuid4())


def _error(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> Any:
    body = {"request_id": _request_id(), "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _participants(value: Any) -> list[Json]:
    """``[{"email", "name"?}]`` from a list of such dicts, of strings, or of pairs."""
    out: list[Json] = []
    for item in value or []:
        if isinstance(item, Mapping):
            entry = {"email": str(item.get("email", ""))}
            if item.get("name"):
                entry["name"] = str(item["name"])
        elif isinstance(item, tuple | list):
            entry = {"email": str(item[1])}
            if item[0]:
                entry["name"] = str(item[0])
        else:
            entry = {"email": str(item)}
        out.append(entry)
    return out


@dataclass
class StoredMessage:
    grant_id: str
    id: str
    thread_id: str
    date: int
    seq: int
    from_: list[Json]
    to: list[Json]
    subject: str | None = None
    body: str | None = None
    folders: list[str] = field(default_factory=lambda: ["INBOX"])
    rfc_message_id: str = ""
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    unread: bool = True

    def sort_key(self) -> tuple[int, int]:
        return (self.date, self.seq)

    def to_json(self, *, include_headers: bool = False) -> Json:
        out: Json = {
            "grant_id": self.grant_id,
            "id": self.id,
            "object": "message",
            "thread_id": self.thread_id,
            "subject": self.subject,
            "from": [dict(p) for p in self.from_],
            "to": [dict(p) for p in self.to],
            "cc": [],
            "bcc": [],
            "reply_to": [],
            "date": self.date,
            "created_at": self.date,
            "unread": self.unread,
            "starred": False,
            "snippet": (self.body or "")[:100],
            "body": self.body,
            "folders": list(self.folders),
            "attachments": [],
        }
        if include_headers:
            headers = [{"name": "Message-ID", "value": self.rfc_message_id}]
            if self.in_reply_to:
                headers.append({"name": "In-Reply-To", "value": self.in_reply_to})
            if self.references:
                headers.append({"name": "References", "value": " ".join(self.references)})
            out["headers"] = headers
        return out


@dataclass(frozen=True)
class NylasOutboxEntry:
    """One email the fake actually sent (one per send that was not answered from cache)."""

    grant_id: str
    reply_to_message_id: str | None
    to: tuple[str, ...]
    subject: str | None
    body: str | None
    idempotency_key: str | None
    sent_message_id: str
    thread_id: str
    sent_at: float

    def to_json(self) -> Json:
        out = asdict(self)
        out["to"] = list(self.to)
        return out


@dataclass
class NylasFaults(MailFaults):
    fail_status: int = 503


@dataclass
class _KeyRecord:
    fingerprint: str
    expires_at: float
    in_flight: bool = True
    status: int | None = None
    body: Json | None = None


class FakeNylas(FakeMailServer[NylasFaults]):
    """In-memory Nylas v3 API over aiohttp, with fault injection.

    ``clock`` returns epoch seconds; it drives message dates and key expiry.
    :meth:`advance_clock` moves it on.
    """

    name = "fake Nylas"
    _messages: dict[str, list[StoredMessage]]
    _outbox: list[NylasOutboxEntry]
    _keys: dict[tuple[str, str], _KeyRecord]

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        cache_errors: bool = True,
    ) -> None:
        super().__init__(NylasFaults(), clock, key_ttl_s)
        self.cache_errors = cache_errors
        self._grants: dict[str, str] = {}
        #: every Idempotency-Key header seen on a send, in arrival order
        self.send_keys: list[str | None] = []

    # ----------------------------------------------------------------- state API

    def seed_grant(self, grant_id: str, email: str) -> Json:
        with self._lock:
            self._grants[grant_id] = email
            return self._grant_json(grant_id)

    def seed_message(
        self,
        grant_id: str,
        *,
        message_id: str | None = None,
        thread_id: str | None = None,
        from_: Sequence[Any] = (("Customer", "customer@example.com"),),
        to: Sequence[Any] | None = None,
        subject: str | None = "Can you resend my invoice?",
        body: str | None = "Hello, can you resend my invoice?",
        date: float | None = None,
        folders: Sequence[str] = ("INBOX",),
        rfc_message_id: str | None = None,
        in_reply_to: str | None = None,
    ) -> Json:
        """Add a message to a grant and return its JSON (with headers).

        Received mail by default. The agent's own mail: ``from_`` the grant's address,
        ``folders=("SENT",)`` and ``in_reply_to`` the replied-to message's *Nylas id*
        (turned into its ``Message-ID`` header here).
        """
        with self._lock:
            own = self._grants.get(grant_id, "")
            parent = self._find(grant_id, in_reply_to) if in_reply_to else None
            msg = StoredMessage(
                grant_id=grant_id,
                id=message_id or self._new_id(),
                thread_id=thread_id or (parent.thread_id if parent else self._new_id()),
                date=int(self.now() if date is None else date),
                seq=self._next_seq(),
                from_=_participants(from_),
                to=_participants(to if to is not None else [own] if own else []),
                subject=subject,
                body=body,
                folders=list(folders),
                rfc_message_id=rfc_message_id or f"<{uuid.uuid4().hex}@mail.example.com>",
                in_reply_to=parent.rfc_message_id if parent else in_reply_to,
                references=[parent.rfc_message_id] if parent else [],
            )
            if self._find(grant_id, msg.id) is not None:
                raise ValueError(f"message {msg.id!r} already exists in grant {grant_id!r}")
            self._messages.setdefault(grant_id, []).append(msg)
            return msg.to_json(include_headers=True)

    def messages(self, grant_id: str) -> list[Json]:
        """Every message of a grant, oldest first, with headers."""
        with self._lock:
            ordered = sorted(self._messages.get(grant_id, []), key=StoredMessage.sort_key)
            return [m.to_json(include_headers=True) for m in ordered]

    def fail_next(self, n: int, status: int = 503) -> None:
        super().fail_next(n, status)

    def reset(self) -> None:
        with self._lock:
            self._grants.clear()
            self.send_keys.clear()
            self._restart(NylasFaults())

    # ----------------------------------------------------------------- internals

    @staticmethod
    def _new_id() -> str:
        return uuid.uuid4().hex[:20]

    def _find(self, grant_id: str, message_id: str) -> StoredMessage | None:
        for msg in self._messages.get(grant_id, []):
            if msg.id == message_id:
                return msg
        return None

    def _grant_json(self, grant_id: str) -> Json:
        return {
            "id": grant_id,
            "provider": "nylas",
            "grant_status": "valid",
            "email": self._grants.get(grant_id),
            "scope": [],
            "created_at": 1_700_000_000,
        }

    # ----------------------------------------------------------------- aiohttp app

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/v3/{tail:.*}", self._api)
        app.router.add_get("/_control/outbox", self._c_outbox)
        app.router.add_post("/_control/clock", self._c_clock)
        return app

    async def _api(self, request: web.Request) -> web.StreamResponse:
        raw_path, parts, raw_body = await self._arrive(request)
        method = request.method
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return _error(401, "unauthorized", "Missing or invalid API key")
        query = request.query
        match parts:
            case ["grants", grant_id] if method == "GET":
                self._count("find_grant")
                return self._find_grant(grant_id)
            case ["grants", grant_id, "messages", "send"] if method == "POST":
                self._count("send")
                return await self._send(request, raw_body, grant_id)
            case ["grants", grant_id, "messages"] if method == "GET":
                self._count("list_messages")
                return self._list_messages(grant_id, query)
            case ["grants", grant_id, "messages", message_id] if method == "GET":
                self._count("find_message")
                return self._find_message(grant_id, message_id, query)
            case ["grants", grant_id, "threads", thread_id] if method == "GET":
                self._count("find_thread")
                return self._find_thread(grant_id, thread_id)
        self._count("unknown_route")
        return _error(404, "not_found_error", f"Route not found: {method} {raw_path}")

    # GET /v3/grants/{grant_id}
    def _find_grant(self, grant_id: str) -> web.Response:
        with self._lock:
            if grant_id not in self._grants:
                return _error(404, "not_found_error", f"Grant {grant_id} not found")
            return web.json_response(
                {"request_id": _request_id(), "data": self._grant_json(grant_id)}
            )

    # GET /v3/grants/{grant_id}/messages/{message_id}
    def _find_message(
        self, grant_id: str, message_id: str, query: Mapping[str, str]
    ) -> web.Response:
        headers = query.get("fields") == "include_headers"
        with self._lock:
            msg = self._find(grant_id, message_id)
            if msg is None:
                return _error(404, "not_found_error", f"Message {message_id} not found")
            data = msg.to_json(include_headers=headers)
        return web.json_response({"request_id": _request_id(), "data": data})

    # GET /v3/grants/{grant_id}/messages
    def _list_messages(self, grant_id: str, query: Any) -> web.Response:
        try:
            limit = min(MAX_LIST_LIMIT, max(1, int(query.get("limit", DEFAULT_LIST_LIMIT))))
            after = int(query["received_after"]) if "received_after" in query else None
            before = int(query["received_before"]) if "received_before" in query else None
            start = int(query.get("page_token") or 0)
        except ValueError as exc:
            return _error(400, "invalid_request_error", f"bad query parameter: {exc}")
        thread_id = query.get("thread_id")
        senders = [s.lower() for s in query.getall("from", [])]
        folder = query.get("in")
        headers = query.get("fields") == "include_headers"

        def keep(m: StoredMessage) -> bool:
            if after is not None and m.date <= after:
                return False
            if before is not None and m.date >= before:
                return False
            if thread_id is not None and m.thread_id != thread_id:
                return False
            if folder is not None and folder not in m.folders:
                return False
            addresses = {p["email"].lower() for p in m.from_}
            return all(s in addresses for s in senders)

        with self._lock:
            ordered = sorted(
                (m for m in self._messages.get(grant_id, []) if keep(m)),
                key=StoredMessage.sort_key,
                reverse=True,  # newest first, as Nylas lists
            )
            page = ordered[start : start + limit]
            data = [m.to_json(include_headers=headers) for m in page]
        body: Json = {"request_id": _request_id(), "data": data}
        if start + limit < len(ordered):
            body["next_cursor"] = str(start + limit)
        return web.json_response(body)

    # GET /v3/grants/{grant_id}/threads/{thread_id}
    def _find_thread(self, grant_id: str, thread_id: str) -> web.Response:
        with self._lock:
            msgs = sorted(
                (m for m in self._messages.get(grant_id, []) if m.thread_id == thread_id),
                key=StoredMessage.sort_key,
            )
            if not msgs:
                return _error(404, "not_found_error", f"Thread {thread_id} not found")
            received = [m.date for m in msgs if "SENT" not in m.folders]
            sent = [m.date for m in msgs if "SENT" in m.folders]
            data: Json = {
                "id": thread_id,
                "grant_id": grant_id,
                "object": "thread",
                "has_drafts": False,
                "starred": False,
                "unread": any(m.unread for m in msgs),
                "message_ids": [m.id for m in msgs],
                "draft_ids": [],
                "folders": sorted({f for m in msgs for f in m.folders}),
                "latest_draft_or_message": msgs[-1].to_json(),
                "earliest_message_date": msgs[0].date,
                "latest_message_received_date": max(received) if received else None,
                "latest_message_sent_date": max(sent) if sent else None,
                "participants": list(
                    {p["email"]: p for m in msgs for p in m.from_ + m.to}.values()
                ),
                "snippet": (msgs[-1].body or "")[:100],
                "subject": msgs[0].subject,
                "has_attachments": False,
            }
        return web.json_response({"request_id": _request_id(), "data": data})

    # POST /v3/grants/{grant_id}/messages/send
    async def _send(self, request: web.Request, raw_body: bytes, grant_id: str) -> web.Response:
        key = request.headers.get("Idempotency-Key")
        with self._lock:
            self.send_keys.append(key)
        if key is not None and len(key) > MAX_KEY_LENGTH:
            return _error(
                400,
                "api.invalid_idempotency_key",
                f"Idempotency-Key is longer than {MAX_KEY_LENGTH} characters",
            )
        try:
            body = json.loads(raw_body) if raw_body.strip() else None
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "request body must be a JSON object")
        fingerprint = json.dumps(body, sort_keys=True, separators=(",", ":"))
        scope = (grant_id, key) if key is not None else None

        with self._lock:
            if scope is not None:
                record = self._live_key(scope)
                if record is not None and record.fingerprint != fingerprint:
                    return _error(
                        409,
                        "api.invalid_idempotent_request",
                        "Idempotency-Key was already used with a different request payload",
                    )
                if record is not None and record.in_flight:
                    return _error(
                        409,
                        "api.concurrent_idempotent_request",
                        "A request with this Idempotency-Key is already in flight",
                    )
                if record is not None:
                    assert record.status is not None and record.body is not None
                    return web.json_response(
                        record.body,
                        status=record.status,
                        headers={"Idempotent-Response": "true"},
                    )
                self._keys[scope] = _KeyRecord(fingerprint, expires_at=self.now() + self.key_ttl_s)
            if self.faults.fail_remaining > 0:
                self.faults.fail_remaining -= 1
                return self._finish_error(
                    scope,
                    self.faults.fail_status,
                    "api.internal_error" if self.faults.fail_status >= 500 else "provider_error",
                    "Injected failure (fail_next): nothing was sent",
                )
            if grant_id not in self._grants:
                return self._finish_error(scope, 404, "not_found_error", "grant not found")
            reply_to = body.get("reply_to_message_id")
            if reply_to is not None and self._find(grant_id, str(reply_to)) is None:
                return self._finish_error(
                    scope, 404, "not_found_error", f"Message {reply_to} not found"
                )
            if not body.get("to"):
                return self._finish_error(
                    scope, 400, "invalid_request_error", "to: at least one recipient is required"
                )

        def send() -> Json:
            response = {"request_id": _request_id(), "data": self._deliver(grant_id, body, key)}
            if scope is not None:
                reserved = self._keys.get(scope)
                self._keys[scope] = _KeyRecord(
                    fingerprint,
                    expires_at=reserved.expires_at if reserved else self.now() + self.key_ttl_s,
                    in_flight=False,
                    status=200,
                    body=response,
                )
            return response

        response = await self._send_holding_key(scope, send)
        await self._answer_delay()
        with self._lock:
            if self.faults.lose_remaining > 0:
                self.faults.lose_remaining -= 1
                return _error(
                    500, "api.internal_error", "Injected failure (lose_response_next): sent"
                )
        return web.json_response(response)

    def _finish_error(
        self, scope: tuple[str, str] | None, status: int, kind: str, message: str
    ) -> web.Response:
        """Answer an error; cache it under the key like Nylas does. Lock held."""
        body = {"request_id": _request_id(), "error": {"type": kind, "message": message}}
        if scope is not None:
            record = self._keys.get(scope)
            if self.cache_errors and record is not None:
                record.in_flight, record.status, record.body = False, status, body
            else:
                self._keys.pop(scope, None)
        return web.json_response(body, status=status)

    def _deliver(self, grant_id: str, body: Mapping[str, Any], key: str | None) -> Json:
        """File the sent message and the outbox entry. Lock held."""
        reply_to = body.get("reply_to_message_id")
        parent = self._find(grant_id, str(reply_to)) if reply_to is not None else None
        own = self._grants[grant_id]
        sent = StoredMessage(
            grant_id=grant_id,
            id=self._new_id(),
            thread_id=parent.thread_id if parent else self._new_id(),
            date=int(self.now()),
            seq=self._next_seq(),
            from_=_participants([own]),
            to=_participants(body.get("to")),
            subject=body.get("subject"),
            body=body.get("body"),
            folders=["SENT"],
            rfc_message_id=f"<{uuid.uuid4().hex}@nylas.example.com>",
            in_reply_to=parent.rfc_message_id if parent else None,
            references=[*parent.references, parent.rfc_message_id] if parent else [],
            unread=False,
        )
        self._messages.setdefault(grant_id, []).append(sent)
        self._outbox.append(
            NylasOutboxEntry(
                grant_id=grant_id,
                reply_to_message_id=str(reply_to) if reply_to is not None else None,
                to=tuple(p["email"] for p in sent.to),
                subject=sent.subject,
                body=sent.body,
                idempotency_key=key,
                sent_message_id=sent.id,
                thread_id=sent.thread_id,
                sent_at=self.now(),
            )
        )
        return sent.to_json()

    # ----------------------------------------------------------------- control API

    async def _c_clock(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            now = self.advance_clock(float(body.get("advance_s", 0.0)))
        except (TypeError, ValueError, AttributeError) as exc:
            return _error(400, "invalid_request_error", f"bad advance_s: {exc!r}")
        return web.json_response({"now": now})


def main(argv: Sequence[str] | None = None) -> None:
    parser = command_line(
        "nylas_server", "Fake Nylas v3 API for tests; prints its base URL on stdout."
    )
    parser.add_argument("--key-ttl-s", type=float, default=DEFAULT_KEY_TTL_S)
    parser.add_argument("--grant", action="append", default=[], help="grant_id=email")
    args = parser.parse_args(argv)
    fake = FakeNylas(key_ttl_s=args.key_ttl_s)
    for item in args.grant:
        grant_id, _, email = item.partition("=")
        fake.seed_grant(grant_id, email)
    asyncio.run(fake.serve(args.host, args.port))


if __name__ == "__main__":
    main()

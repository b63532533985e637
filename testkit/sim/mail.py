"""SimMail: AgentMail's API as a :class:`~onceonly.processors.mail.protocol.MailClient`, in pure
Python on virtual time, with the idempotency semantics of
:class:`testkit.fakes.agentmail_server.FakeAgentMail` (its ``_reply``, ``_send_reply`` and
``_answer``), without its HTTP.

A reply's ``Idempotency-Key`` (the record's key) is honoured unless the world ignores
keys: a key first seen is held *in flight* while the email is sent (another request with
it gets 409 in-flight), then holds the response, which a request with the same content
gets again (a replay) and one with other content gets 409 conflict. Faults: the next
replies fail with a 5xx before any effect (the key is released), or lose their answer
(the email is sent, the caller gets a 500).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.agentmail.messages import find_sent_reply
from onceonly.schemas.ledger import ReplyRecord
from testkit.sim.io import MAIL, Later, current, remote
from testkit.sim.schedule import Cuts

Trace = Callable[[str, str], None]
T = TypeVar("T")
#: the SDK client's timeout (``ONCEONLY_SEND_TIMEOUT_S``'s default)
CLIENT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class SentEmail:
    inbox_id: str
    replied_to: str
    text: str | None
    key: str | None
    message_id: str
    at: float
    #: sent by a member that no longer owned the partition when the email took effect (its
    #: fence check passed before it lost it): with keys ignored, the window that remains
    stale: bool = False
    #: took effect after its client gave up on it (a request held by a cut, :func:`timed`)
    late: bool = False


@dataclass(slots=True)
class _Key:
    fingerprint: tuple[str, str, str]
    in_flight: bool = True
    response: str | None = None


@dataclass(slots=True)
class MailFaults:
    ignore_keys: bool = False
    fail_next: int = 0  #: replies that fail with a 503 before any effect
    lose_next: int = 0  #: replies that take effect, then answer 500


class SimMail:
    """AgentMail as the worker's mail client; ``outbox`` holds every email sent."""

    def __init__(self, rng: random.Random, trace: Trace, clock: Callable[[], float]) -> None:
        self.rng = rng
        self.trace = trace
        self.clock = clock
        self.faults = MailFaults()
        self.outbox: list[SentEmail] = []
        self._threads: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._thread_of: dict[tuple[str, str], str] = {}
        self._keys: dict[str, _Key] = {}
        self._sent = 0

    # -- the world's side ----------------------------------------------------------------

    def receive(self, inbox_id: str, message_id: str, thread_id: str, text: str) -> None:
        """An inbound message reaches the inbox (before its webhook)."""
        self._thread_of[(inbox_id, message_id)] = thread_id
        self._threads.setdefault((inbox_id, thread_id), []).append(
            {"message_id": message_id, "labels": ["received"], "text": text, "in_reply_to": None}
        )

    def _latency(self) -> float:
        return self.rng.uniform(0.02, 0.4)

    # -- MailClient ----------------------------------------------------------------------

    @property
    def dry_run(self) -> bool:
        return False

    async def reply(self, record: ReplyRecord, owns: Callable[[], bool] = lambda: True) -> str:
        """A send; ``owns``: whether its sender still owns the partition (asked as the email
        takes effect, to mark it stale). Its email is marked late if its client gave up on
        it (timed out, or its lane cancelled while a cut held it), before or after it took
        effect."""
        request = _Request()
        far = lambda: self._reply(record, owns, request)  # noqa: E731
        sent = remote(self._latency(), far, self._latency(), MAIL)
        try:
            return await timed(sent, f"a send of {record.message_id}", request)
        except asyncio.CancelledError:
            actor = current.get()
            request.given_up = actor is not None and actor.cut_for(MAIL) > 0
            raise
        finally:
            if request.given_up and request.sent is not None:
                email = self.outbox[request.sent]
                self.outbox[request.sent] = dataclasses.replace(email, late=True)

    async def find_reply(self, record: ReplyRecord) -> str | None:
        def read() -> str | None:
            thread = self._thread_of.get((record.inbox_id, record.message_id), "")
            return find_sent_reply(
                self._threads.get((record.inbox_id, thread), []), record.message_id
            )

        read_it = remote(self._latency(), read, self._latency(), MAIL)
        found = await timed(read_it, f"a read of {record.message_id}'s thread")
        self.trace("mail", f"find_reply {record.message_id} -> {found}")
        return found

    async def fetch(self, account: str, message_id: str) -> dict[str, Any]:
        thread = self._thread_of.get((account, message_id), "")
        for message in self._threads.get((account, thread), []):
            if message["message_id"] == message_id:
                return dict(message)
        raise SendError(SendFailure.REJECTED, f"message {message_id} not found", status=404)

    async def thread(self, account: str, thread_id: str) -> list[dict[str, Any]]:
        return [dict(m) for m in self._threads.get((account, thread_id), [])]

    async def messages_since(self, account: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        for (inbox, _), messages in self._threads.items():
            if inbox == account:
                for message in messages:
                    yield dict(message)

    async def address(self, account: str) -> str | None:
        return account

    async def aclose(self) -> None:
        return None

    # -- the far end of a reply ----------------------------------------------------------

    def _reply(
        self, record: ReplyRecord, owns: Callable[[], bool], request: _Request
    ) -> str | Later[str]:
        ids = f"{record.message_id} text={record.reply_text!r}"
        faults = self.faults
        key = None if faults.ignore_keys else record.key
        fingerprint = (record.inbox_id, record.message_id, record.reply_text or "")
        if faults.fail_next > 0:
            faults.fail_next -= 1
            self.trace("mail", f"503 {ids}")
            raise SendError(SendFailure.RETRY, "503: nothing was sent", status=503)
        if key is not None:
            known = self._keys.get(key)
            if known is not None and known.fingerprint != fingerprint:
                self.trace("mail", f"409 conflict {ids}")
                raise SendError(SendFailure.CONFLICT, "409 IdempotencyConflict", status=409)
            if known is not None and known.in_flight:
                self.trace("mail", f"409 in-flight {ids}")
                raise SendError(SendFailure.IN_FLIGHT, "409 IdempotencyInFlight", status=409)
            if known is not None and known.response is not None:
                self.trace("mail", f"replay {ids} -> {known.response}")
                return self._answer(known.response, ids)
            self._keys[key] = _Key(fingerprint)

        def sent() -> str:
            sent = self._send(record, key, stale=not owns(), late=request.given_up)
            request.sent = len(self.outbox) - 1
            self.trace("mail", f"sent {ids} -> {sent}")
            if key is not None:
                self._keys[key] = _Key(fingerprint, in_flight=False, response=sent)
            return self._answer(sent, ids)

        return Later(self.rng.uniform(0.05, 2.0), sent)  # sending: the key is in flight

    def _answer(self, response: str, ids: str) -> str:
        if self.faults.lose_next > 0:
            self.faults.lose_next -= 1
            self.trace("mail", f"answer lost {ids}")
            raise SendError(SendFailure.RETRY, "500 after the request took effect", status=500)
        return response

    def _send(self, record: ReplyRecord, key: str | None, *, stale: bool, late: bool) -> str:
        self._sent += 1
        sent_id = f"<sent{self._sent}@sim>"
        thread = self._thread_of.get((record.inbox_id, record.message_id), "")
        self._threads.setdefault((record.inbox_id, thread), []).append(
            {
                "message_id": sent_id,
                "labels": ["sent"],
                "text": record.reply_text,
                "in_reply_to": record.message_id,
            }
        )
        self.outbox.append(
            SentEmail(
                record.inbox_id,
                record.message_id,
                record.reply_text,
                key,
                sent_id,
                self.clock(),
                stale,
                late,
            )
        )
        return sent_id


async def read(out_s: float, far: Callable[[], T], back_s: float, what: str) -> T:
    """A thread or message read of the mail API (an approval's, a letter's message): held
    by a cut from it as a send is with :attr:`Cuts.reads <testkit.sim.schedule.Cuts>`, else
    never (``--no-read-cuts``)."""
    if not Cuts.reads:
        return await remote(out_s, far, back_s)
    return await timed(remote(out_s, far, back_s, MAIL), what)


@dataclass(slots=True)
class _Request:
    """A send's request: whether its client gave up on it (timed out), and its email."""

    given_up: bool = False
    sent: int | None = None  #: the email's index in the outbox, once it took effect


async def timed(call: Coroutine[Any, Any, T], what: str, request: _Request | None = None) -> T:
    """``call`` within the SDK client's timeout, for a worker that was ever cut off from the
    mail API (:data:`~testkit.sim.io.MAIL`): the request it made during a cut leaves at the
    heal, as TCP sends it again, and takes effect then, whether or not the client gave up
    on it (a timeout is retryable: the policy tries again with the key). Other workers'
    calls take the time they take, as before cuts were simulated."""
    actor = current.get()
    if actor is None or MAIL not in actor.cut:
        return await call
    try:
        return await asyncio.wait_for(call, CLIENT_TIMEOUT_S)
    except TimeoutError:
        if request is not None:
            request.given_up = True
        raise SendError(
            SendFailure.RETRY, f"{what}: no answer within {CLIENT_TIMEOUT_S:.0f} s"
        ) from None


class MemberMail:
    """The mail API as one member sends through it: each email marked with whether the
    member still owned the partition when it took effect."""

    def __init__(self, mail: SimMail, owns: Callable[[], bool]) -> None:
        self.mail = mail
        self.owns = owns

    async def reply(self, record: ReplyRecord) -> str:
        return await self.mail.reply(record, self.owns)

    async def find_reply(self, record: ReplyRecord) -> str | None:
        return await self.mail.find_reply(record)

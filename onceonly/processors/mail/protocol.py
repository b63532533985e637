"""What the worker and catch-up use of a mail provider, declared whole.

A mail provider is two objects, each a protocol here:

* :class:`MailClient`, the provider's API in the provider's own shapes (its message
  dicts, as its SDK returns them): send a reply with its key, find a reply already sent,
  fetch a message, read a thread, list the messages since a time, the account's own
  address, whether its webhook is still on, and close. Each provider package has two:
  the real one (over the SDK) and its dry run (no API key: nothing is sent, replies go to
  the dry-run outbox, and the thread it reads back holds them *in the provider's
  shapes*, so the same channel reads both).
* :class:`MailProvider`, the channel: how one of the provider's events becomes a message
  to answer (or a :class:`~onceonly.processors.messages.Skip`), the thread's history as
  :class:`~onceonly.processors.messages.ThreadMessage` s, and which listed message
  catch-up feeds (:class:`Missed`), over its client (``sender``).

Each provider package implements both whole (``tests/unit/processors/test_mail_providers.py``
checks it at run time), and :mod:`onceonly.processors.mail.registry` holds them by name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from onceonly.processors.messages import Inbound, Skip, ThreadMessage
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord

__all__ = [
    "MailClient",
    "MailProvider",
    "Missed",
    "catch_up_event_id",
    "resend_event_id",
    "resent_envelope",
]


@runtime_checkable
class MailClient(Protocol):
    """A provider's mail API, real or dry run; every dict is in the provider's own shape.

    ``account`` is the provider's mailbox: an AgentMail inbox id, a Nylas grant id.
    Failures raise :class:`~onceonly.processors.exceptions.SendError`.
    """

    @property
    def dry_run(self) -> bool:
        """True for the dry run: nothing is sent, fetched or listed."""

    async def reply(self, record: ReplyRecord) -> str:
        """Send ``record.reply_text`` with ``record.key``; return the sent message id."""

    async def find_reply(self, record: ReplyRecord) -> str | None:
        """The id of a reply already sent to ``record.message_id``, if the thread has one;
        a :class:`~onceonly.processors.messages.FoundReply` where its text is known."""

    async def fetch(self, account: str, message_id: str) -> dict[str, Any]:
        """The whole message (for events that left its body out)."""

    async def thread(self, account: str, thread_id: str) -> list[dict[str, Any]]:
        """The thread's messages, oldest first, the agent's own replies included."""

    def messages_since(self, account: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        """Every message of the account at or after ``since``, oldest first (catch-up feeds
        them in this order): page by page where the API lists oldest first; a provider whose
        API lists newest first reads every page before it yields."""

    async def address(self, account: str) -> str | None:
        """The account's own address (its mail is never answered), if known."""

    async def webhook_enabled(self, webhook_id: str) -> bool | None:
        """Whether the provider still delivers to its webhook ``webhook_id`` (one that fails
        for days is turned off, silently); None where this client cannot tell (the dry
        run reads nothing). A failed read raises."""

    async def aclose(self) -> None:
        """Close the connections this client opened."""


@dataclass(frozen=True, slots=True)
class Missed:
    """A listed message catch-up feeds, as if its webhook had come."""

    message_id: str
    at: float  #: its time (epoch seconds): catch-up feeds the oldest first
    #: the webhook body the provider would have sent for it (what ingest normalises)
    webhook: dict[str, Any]


def catch_up_event_id(account: str, message_id: str) -> str:
    """The same message always gets the same id, so repeated catch-ups dedupe."""
    return "catchup-" + hashlib.sha256(f"{account}\n{message_id}".encode()).hexdigest()[:32]


def resend_event_id(account: str, message_id: str) -> str:
    """The id of a message's event made again for a dead letter
    (:meth:`MailProvider.envelope_again`): neither its webhook's nor catch-up's, whose
    dedupe entries say *succeeded*, so a retry of the letter is processed; the same for a
    message each time, so two retries of it dedupe."""
    return "resend-" + hashlib.sha256(f"{account}\n{message_id}".encode()).hexdigest()[:32]


def resent_envelope(
    provider: str,
    record: ReplyRecord,
    event_type: str,
    at: datetime,
    received_at: datetime,
    webhook: Mapping[str, Any],
) -> Envelope:
    """The envelope of ``record``'s message made again with ``webhook`` (its body left out:
    truncated, the worker fetches it) under :func:`resend_event_id`: what each channel's
    :meth:`MailProvider.envelope_again` returns."""
    return Envelope(
        provider=provider,
        event_id=resend_event_id(record.inbox_id, record.message_id),
        event_type=event_type,
        thread_key=record.thread_key,
        account_id=record.inbox_id,
        message_id=record.message_id,
        occurred_at=at,
        received_at=received_at,
        truncated=True,
        raw=json.dumps(webhook),
    )


@runtime_checkable
class MailProvider(Protocol):
    """A mail provider as the worker and catch-up use it: its channel over its client."""

    @property
    def name(self) -> str:
        """The provider's name: its route, and the ``provider`` of its envelopes."""

    @property
    def sender(self) -> MailClient:
        """Its API (or its dry run): send, find a sent reply, fetch, thread, list."""

    async def inbound(self, envelope: Envelope) -> Inbound | Skip:
        """The message to answer (fetched in full if the event left its body out), or why not.

        Raises :class:`~onceonly.processors.exceptions.SendError` if a fetch fails.
        """

    async def history(self, message: Inbound) -> Sequence[ThreadMessage]:
        """The thread's messages before ``message``, the agent's own replies included."""

    async def thread_of(self, record: ReplyRecord) -> Sequence[ThreadMessage]:
        """Every message of the thread of ``record``'s message, in order, the agent's own
        replies included (what a decision on a draft reads: a newer reply covering it)."""

    async def missed(self, account: str, message: Mapping[str, Any]) -> Missed | None:
        """A message :meth:`MailClient.messages_since` listed, as catch-up feeds it; None for
        the account's own mail."""

    def envelope_again(self, record: ReplyRecord, received_at: datetime) -> Envelope:
        """The event of ``record``'s message made again from the record alone: a received
        message with its body left out (the worker fetches it), with
        :func:`resend_event_id`. What a dead letter carries when the message's own
        envelope is kept nowhere (an approved draft's send failed long after its burst was
        settled: :mod:`onceonly.processors.approval.applying`)."""

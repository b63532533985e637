"""What one reply reaches of the worker: the ledger and mail-sender protocols, the writer
and dead-letter steps, the send policy, and :class:`ReplyParts`, which holds them all as
one typed object for :func:`~onceonly.processors.reply.once.reply_once` (its part a send
needs, :class:`SendParts`, for the send of a reply already recorded)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from onceonly.processors.messages import Inbound
from onceonly.processors.reply.arbitration import Ruling, Verdict
from onceonly.processors.writer.contract import Decline, Draft
from onceonly.schemas.ledger import ReplyRecord


class Ledger(Protocol):
    def get(self, key: str) -> ReplyRecord | None: ...

    async def put(self, record: ReplyRecord) -> None:
        """Store the record; return only once the broker has acknowledged it."""


class MailSender(Protocol):
    async def reply(self, record: ReplyRecord) -> str:
        """Send ``record.reply_text`` with ``record.key``; return the sent message id.

        Raises :class:`SendError` whose ``failure`` says what the policy should do.
        """

    async def find_reply(self, record: ReplyRecord) -> str | None:
        """Look in the thread for a reply already sent to ``record.message_id``: its id, a
        :class:`~onceonly.processors.messages.FoundReply` where the thread's text is known."""


#: the writer step: the messages so far -> the text, a Decline or a Draft; raises WriterFailed
Write = Callable[[Sequence[Inbound]], Awaitable[str | Decline | Draft]]
#: new messages of the thread that reached the worker meanwhile (claimed for this reply)
Newer = Callable[[], Awaitable[Sequence[Inbound]]]
DeadLetter = Callable[[ReplyRecord, str, Sequence[Inbound]], Awaitable[None]]


async def nothing_newer() -> Sequence[Inbound]:
    return ()


@dataclass(frozen=True, slots=True)
class SendPolicy:
    attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    #: a 409 "first send in flight" is retried for this long from the first attempt,
    #: whatever ``attempts`` says: that send (this worker's own before a restart, or a
    #: paused owner's) may still succeed, and giving up would dead-letter a reply sent
    in_flight_wait_s: float = 60.0


def _no_op() -> None:
    return None


def _kept_nowhere(record: ReplyRecord, sender: MailSender) -> None:
    return None


def _always() -> bool:
    return True


async def _first(record: ReplyRecord) -> Verdict:
    return Verdict(Ruling.OWN, record)


@dataclass(frozen=True, slots=True, kw_only=True)
class SendParts:
    """What the send of a recorded reply reaches, as one typed object: the ledger, the
    sender and the dead-letter step; the send policy; the ledger's arbitration; and the
    hooks the worker counts and stands down by. An approved draft is sent with these
    alone (:func:`~onceonly.processors.reply.sending.send_recorded`): no writer."""

    ledger: Ledger
    sender: MailSender
    dead_letter: DeadLetter
    policy: SendPolicy = SendPolicy()
    on_retry: Callable[[], None] = _no_op
    #: False once a rebalance began: a send is then not retried here (its next owner does)
    may_retry: Callable[[], bool] = _always
    #: a *pending* record against other writers' records of its key, before its send
    #: (:meth:`~onceonly.processors.reply.ledger.TableLedger.arbitrate`; default: none)
    arbitrate: Callable[[ReplyRecord], Awaitable[Verdict]] = _first
    #: monotonic seconds, for how long a send has been retried (the in-flight wait)
    monotonic: Callable[[], float] = time.monotonic
    #: a reply recorded *failed* after sends whose outcomes are unknown, with its sender:
    #: its thread is read again later (``late_sends.LateSends.failed``)
    unsettled: Callable[[ReplyRecord, MailSender], None] = _kept_nowhere


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyParts(SendParts):
    """What one reply reaches of the worker: what its send does (:class:`SendParts`), and
    the writer step and the clock, the thread's newer messages, and the hook counting a
    reply written again."""

    write: Write
    now: Callable[[], datetime]
    #: the burst comes from a replay (a catch-up, a retry): see :func:`plan`
    replay: bool = False
    channel: str = "agentmail"
    #: messages of the thread that reached the worker while the writer was composing
    newer: Newer = nothing_newer
    #: how often those make the writer write again before the reply is recorded
    supersede_max: int = 2
    on_superseded: Callable[[], None] = _no_op


def log_ids(record: ReplyRecord | Inbound) -> dict[str, str]:
    """The ids a reply's log lines carry: its key, inbox and message."""
    return {"key": record.key, "inbox_id": record.inbox_id, "message_id": record.message_id}

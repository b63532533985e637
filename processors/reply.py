"""Reply once: the key, the plan for a ledger record, bursts, skips, and the send policy.

The decisions are pure functions. :func:`reply_once` strings them together against
three small protocols (a ledger that acknowledges writes, a mail sender, a reply
writer), so it runs the same under the faust worker and in unit tests.

The order is the guarantee: the reply text and its idempotency key are recorded in the
ledger, and the broker has acknowledged them, *before* the email is sent with that key.
A crash anywhere resends the same text with the same key, which the mail API replays
instead of sending twice.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parseaddr
from enum import StrEnum
from typing import Any, Protocol

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from processors.exceptions import Rebalancing, SendError, SendFailure
from schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.reply")

#: AgentMail keeps an idempotency key for 24 h after the send completes.
AGENTMAIL_KEY_LIFETIME = timedelta(hours=24)

#: AgentMail event types that are mail but not mail to answer.
NOT_REAL_MAIL = frozenset(
    {"message.received.spam", "message.received.blocked", "message.received.unauthenticated"}
)


def reply_key(inbox_id: str, message_id: str) -> str:
    """``reply-`` + sha256(inbox_id, newline, message_id): only ``A-Z a-z 0-9 - . _ ~``."""
    return "reply-" + hashlib.sha256(f"{inbox_id}\n{message_id}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Inbound:
    """One received message, as the reply writer and the sender see it."""

    inbox_id: str
    message_id: str
    thread_key: str
    thread_id: str
    event_id: str
    occurred_at: datetime
    sender: str
    subject: str | None
    text: str | None
    labels: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return reply_key(self.inbox_id, self.message_id)


class Skip(StrEnum):
    NOT_RECEIVED = "not_received"  #: an event type that is not an inbound message
    NOT_REAL_MAIL = "not_real_mail"  #: spam, blocked, unauthenticated
    OWN_MESSAGE = "own_message"  #: the agent's own outbound mail


def skip_reason(event_type: str, message: Inbound) -> Skip | None:
    """Why a message.received event must not be answered, or None to answer it."""
    if event_type in NOT_REAL_MAIL:
        return Skip.NOT_REAL_MAIL
    if event_type != "message.received":
        return Skip.NOT_RECEIVED
    sender = parseaddr(message.sender)[1].lower()
    if "sent" in message.labels or (sender and sender == message.inbox_id.lower()):
        return Skip.OWN_MESSAGE
    return None


class Plan(StrEnum):
    WRITE = "write"  #: no record: write the reply, record it, then send
    SEND = "send"  #: a pending record: send its stored text with its stored key
    RECONCILE = "reconcile"  #: a pending record older than the key lifetime: look first
    SKIP_SENT = "skip_sent"
    SKIP_COVERED = "skip_covered"
    SKIP_FAILED = "skip_failed"


def plan(
    record: ReplyRecord | None,
    *,
    now: datetime,
    key_lifetime: timedelta = AGENTMAIL_KEY_LIFETIME,
    replay: bool = False,
) -> Plan:
    if record is None:
        return Plan.WRITE
    match record.state:
        case ReplyState.SENT:
            return Plan.SKIP_SENT
        case ReplyState.COVERED:
            return Plan.SKIP_COVERED
        case ReplyState.FAILED if not replay:
            return Plan.SKIP_FAILED
    if now - record.created_at > key_lifetime:
        return Plan.RECONCILE
    return Plan.SEND


def split_burst(burst: Sequence[Inbound]) -> tuple[Inbound, tuple[Inbound, ...]]:
    """The message to answer (the latest) and the ones its reply covers."""
    ordered = sorted(burst, key=lambda m: (m.occurred_at, m.event_id))
    return ordered[-1], tuple(ordered[:-1])


def find_sent_reply(thread_messages: Iterable[Mapping[str, Any]], message_id: str) -> str | None:
    """The id of a message labelled sent that replies to ``message_id``, if the thread has one."""
    for message in thread_messages:
        labels = message.get("labels") or ()
        if "sent" in labels and message.get("in_reply_to") == message_id:
            return str(message.get("message_id"))
    return None


# -- the moving parts --------------------------------------------------------------


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
        """Look in the thread for a reply already sent to ``record.message_id``."""


ReplyWriter = Callable[[Sequence[Inbound]], str | Awaitable[str]]
DeadLetter = Callable[[ReplyRecord, str], Awaitable[None]]


async def write_reply(writer: ReplyWriter, burst: Sequence[Inbound]) -> str:
    text = writer(burst)
    if inspect.isawaitable(text):
        text = await text
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"the reply writer returned {type(text).__name__}, not a non-empty str")
    return text


@dataclass(frozen=True, slots=True)
class SendPolicy:
    attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


class Outcome(StrEnum):
    SENT = "sent"
    ALREADY = "already"  #: sent or covered before; nothing to do
    FAILED = "failed"  #: dead-lettered


@dataclass(frozen=True, slots=True)
class BurstResult:
    outcome: Outcome
    key: str
    sent_message_id: str | None = None


async def reply_once(
    burst: Sequence[Inbound],
    *,
    ledger: Ledger,
    sender: MailSender,
    writer: ReplyWriter,
    dead_letter: DeadLetter,
    now: Callable[[], datetime],
    policy: SendPolicy = SendPolicy(),
    key_lifetime: timedelta = AGENTMAIL_KEY_LIFETIME,
    replay: bool = False,
    on_retry: Callable[[], None] = lambda: None,
    channel: str = "agentmail",
    may_retry: Callable[[], bool] = lambda: True,
) -> BurstResult:
    """Answer a burst of one thread's messages with exactly one reply, to the latest."""
    target, covered = split_burst(burst)
    record = ledger.get(target.key)
    step = plan(record, now=now(), key_lifetime=key_lifetime, replay=replay)
    ids = {"key": target.key, "inbox_id": target.inbox_id, "message_id": target.message_id}

    if step in (Plan.SKIP_SENT, Plan.SKIP_COVERED, Plan.SKIP_FAILED):
        log.info("reply skipped: already handled", reason=step.value, **ids)
        await _cover(ledger, covered, target.key, now, channel)
        return BurstResult(Outcome.ALREADY, target.key, record.sent_message_id if record else None)

    if record is None:
        text = await write_reply(writer, burst)
        record = ReplyRecord(
            key=target.key,
            inbox_id=target.inbox_id,
            message_id=target.message_id,
            thread_key=target.thread_key,
            state=ReplyState.PENDING,
            created_at=now(),
            reply_text=text,
            channel=channel,
        )
        await ledger.put(record)  # acknowledged before anything is sent
    await _cover(ledger, covered, target.key, now, channel)

    # a stale record reads the thread first; that read follows the same retry policy
    reconciled = step is not Plan.RECONCILE
    found: str | None = None
    attempts = 0
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(policy.attempts),
            wait=wait_random_exponential(
                multiplier=policy.backoff_initial_s, max=policy.backoff_max_s
            ),
            retry=retry_if_exception(
                lambda e: isinstance(e, SendError) and e.failure is SendFailure.RETRY
            ),
            reraise=True,
        ):
            with attempt:
                attempts += 1
                if attempts > 1:
                    if not may_retry():
                        raise Rebalancing(
                            f"a rebalance began while reply {target.key} was being retried "
                            f"(attempt {attempts}); its next owner resumes it with the same key"
                        )
                    on_retry()
                    log.warning("send retry with the same key", attempt=attempts, **ids)
                if not reconciled:
                    found = await sender.find_reply(record)
                    reconciled = True
                if found is None:
                    sent_id = await sender.reply(record)
    except SendError as exc:
        reason = (
            f"{exc.failure.value} after {attempts} attempt(s): {exc}"
            if exc.failure is SendFailure.RETRY
            else f"{exc.failure.value}: {exc}"
        )
        failed = record.with_state(ReplyState.FAILED, attempts=attempts, error=str(exc))
        await ledger.put(failed)
        await dead_letter(failed, reason)
        log.error("reply dead-lettered", reason=reason, attempts=attempts, **ids)
        return BurstResult(Outcome.FAILED, target.key)

    if found is not None:
        log.info("reply found in the thread; recorded as sent", sent=found, **ids)
        await ledger.put(record.with_state(ReplyState.SENT, sent_message_id=found))
        return BurstResult(Outcome.ALREADY, target.key, found)
    await ledger.put(record.with_state(ReplyState.SENT, sent_message_id=sent_id, attempts=attempts))
    log.info("reply sent", sent=sent_id, attempts=attempts, covered=len(covered), **ids)
    return BurstResult(Outcome.SENT, target.key, sent_id)


async def _cover(
    ledger: Ledger,
    covered: Iterable[Inbound],
    by: str,
    now: Callable[[], datetime],
    channel: str = "agentmail",
) -> None:
    """Record the burst's other messages as answered by ``by``, unless they have a record."""
    for message in covered:
        if ledger.get(message.key) is not None:
            continue
        await ledger.put(
            ReplyRecord(
                key=message.key,
                inbox_id=message.inbox_id,
                message_id=message.message_id,
                thread_key=message.thread_key,
                state=ReplyState.COVERED,
                created_at=now(),
                covered_by=by,
                channel=channel,
            )
        )
        log.info("message covered by the burst's reply", key=message.key, covered_by=by)


def inbound_from_agentmail(
    message: Mapping[str, Any], *, thread_key: str, event_id: str, fallback_time: datetime
) -> Inbound:
    """An AgentMail ``message`` object (from an event or from ``messages.get``) as an Inbound."""
    occurred = message.get("timestamp")
    when = fallback_time
    if isinstance(occurred, str):
        try:
            when = datetime.fromisoformat(occurred.replace("Z", "+00:00"))
        except ValueError:
            when = fallback_time
    text = message.get("text") or message.get("extracted_text")
    return Inbound(
        inbox_id=str(message.get("inbox_id", "")),
        message_id=str(message.get("message_id", "")),
        thread_key=thread_key,
        thread_id=str(message.get("thread_id", "")),
        event_id=event_id,
        occurred_at=when,
        sender=str(message.get("from") or message.get("from_") or ""),
        subject=message.get("subject"),
        text=str(text) if text is not None else None,
        labels=tuple(message.get("labels") or ()),
    )

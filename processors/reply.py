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

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from processors.exceptions import Rebalancing, SendError, SendFailure, WriterFailed
from processors.messages import Decline
from processors.messages import Inbound as Inbound
from processors.messages import reply_key as reply_key
from schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.reply")

#: how long a mail API keeps an idempotency key unless its channel says otherwise
KEY_LIFETIME = timedelta(hours=24)


class Skip(StrEnum):
    NOT_RECEIVED = "not_received"  #: an event type that is not an inbound message
    NOT_REAL_MAIL = "not_real_mail"  #: spam, blocked, unauthenticated
    OWN_MESSAGE = "own_message"  #: the agent's own outbound mail


class Plan(StrEnum):
    WRITE = "write"  #: no record: write the reply, record it, then send
    SEND = "send"  #: a pending record: send its stored text with its stored key
    RECONCILE = "reconcile"  #: a pending record older than the key lifetime: look first
    SKIP_SENT = "skip_sent"
    SKIP_COVERED = "skip_covered"
    SKIP_FAILED = "skip_failed"
    SKIP_DECLINED = "skip_declined"


def plan(
    record: ReplyRecord | None,
    *,
    now: datetime,
    key_lifetime: timedelta = KEY_LIFETIME,
    replay: bool = False,
) -> Plan:
    if record is None:
        return Plan.WRITE
    match record.state:
        case ReplyState.SENT:
            return Plan.SKIP_SENT
        case ReplyState.COVERED:
            return Plan.SKIP_COVERED
        case ReplyState.DECLINED:
            return Plan.SKIP_DECLINED  # the writer's decision stands, replay or not
        case ReplyState.FAILED if not replay:
            return Plan.SKIP_FAILED
        case ReplyState.FAILED if record.reply_text is None:
            return Plan.WRITE  # the writer failed: a replay asks it again
    if now - record.created_at > key_lifetime:
        return Plan.RECONCILE
    return Plan.SEND


def split_burst(burst: Sequence[Inbound]) -> tuple[Inbound, tuple[Inbound, ...]]:
    """The message to answer (the latest) and the ones its reply covers."""
    ordered = sorted(burst, key=lambda m: (m.occurred_at, m.event_id))
    return ordered[-1], tuple(ordered[:-1])


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


ReplyWriter = Callable[[Sequence[Inbound]], Any]
#: the writer step: the messages so far -> the text, or a Decline; raises WriterFailed
Write = Callable[[Sequence[Inbound]], Awaitable[str | Decline]]
#: new messages of the thread that reached the worker meanwhile (claimed for this reply)
Newer = Callable[[], Awaitable[Sequence[Inbound]]]
DeadLetter = Callable[[ReplyRecord, str, Sequence[Inbound]], Awaitable[None]]


async def _nothing_newer() -> Sequence[Inbound]:
    return ()


def simple_write(writer: ReplyWriter) -> Write:
    """A plain callable as the writer step, with no policy (unit tests, tools)."""

    async def write(burst: Sequence[Inbound]) -> str | Decline:
        text = writer(burst)
        if inspect.isawaitable(text):
            text = await text
        if text is None or isinstance(text, Decline):
            return text or Decline("the writer returned None")
        if not isinstance(text, str) or not text.strip():
            raise TypeError(f"the reply writer returned {type(text).__name__}, not a non-empty str")
        return text

    return write


@dataclass(frozen=True, slots=True)
class SendPolicy:
    attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


class Outcome(StrEnum):
    SENT = "sent"
    ALREADY = "already"  #: sent or covered before; nothing to do
    FAILED = "failed"  #: dead-lettered
    DECLINED = "declined"  #: the writer chose not to answer


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
    write: Write,
    dead_letter: DeadLetter,
    now: Callable[[], datetime],
    policy: SendPolicy = SendPolicy(),
    key_lifetime: timedelta = KEY_LIFETIME,
    replay: bool = False,
    on_retry: Callable[[], None] = lambda: None,
    channel: str = "agentmail",
    may_retry: Callable[[], bool] = lambda: True,
    newer: Newer = _nothing_newer,
    supersede_max: int = 2,
    on_superseded: Callable[[], None] = lambda: None,
) -> BurstResult:
    """Answer a burst of one thread's messages with exactly one reply, to the latest.

    If ``newer`` finds messages of the thread that reached the worker while the writer
    was composing, that text is not recorded: the writer is asked again with the whole
    burst (at most ``supersede_max`` times), and the one reply goes to the latest.
    """
    target, covered = split_burst(burst)
    record = ledger.get(target.key)
    step = plan(record, now=now(), key_lifetime=key_lifetime, replay=replay)
    ids = {"key": target.key, "inbox_id": target.inbox_id, "message_id": target.message_id}

    if step in (Plan.SKIP_SENT, Plan.SKIP_COVERED, Plan.SKIP_FAILED, Plan.SKIP_DECLINED):
        log.info("reply skipped: already handled", reason=step.value, **ids)
        await _cover(ledger, covered, target.key, now, channel)
        outcome = Outcome.DECLINED if step is Plan.SKIP_DECLINED else Outcome.ALREADY
        return BurstResult(outcome, target.key, record.sent_message_id if record else None)

    if step is Plan.WRITE:
        written = await _compose(
            burst, ledger, write, newer, supersede_max, on_superseded, now, channel, dead_letter
        )
        if isinstance(written, BurstResult):
            return written
        record, covered, burst = written
    assert record is not None
    # the record's key, not the first target's: a rewrite answers the latest message
    await _cover(ledger, covered, record.key, now, channel)
    return await _send(
        record,
        sender=sender,
        ledger=ledger,
        dead_letter=dead_letter,
        policy=policy,
        reconcile=step is Plan.RECONCILE,
        on_retry=on_retry,
        may_retry=may_retry,
        burst=burst,
        covered=len(covered),
    )


def _record_for(target: Inbound, state: ReplyState, now: datetime, channel: str) -> ReplyRecord:
    return ReplyRecord(
        key=target.key,
        inbox_id=target.inbox_id,
        message_id=target.message_id,
        thread_key=target.thread_key,
        state=state,
        created_at=now,
        channel=channel,
        message_at=target.occurred_at,
    )


async def _compose(
    burst: Sequence[Inbound],
    ledger: Ledger,
    write: Write,
    newer: Newer,
    supersede_max: int,
    on_superseded: Callable[[], None],
    now: Callable[[], datetime],
    channel: str,
    dead_letter: DeadLetter,
) -> BurstResult | tuple[ReplyRecord, tuple[Inbound, ...], list[Inbound]]:
    """Ask the writer (again, while newer messages arrive); record what it decided.

    Returns the acknowledged *pending* record, the messages it covers and all the messages
    it answers (the burst and what superseded it), or the result when there is nothing to
    send (declined, or the writer failed and was dead-lettered).
    """
    messages = list(burst)
    try:
        written = await write(messages)
        for _ in range(supersede_max):
            more = [m for m in await newer() if ledger.get(m.key) is None]
            if not more:
                break
            messages.extend(more)
            on_superseded()
            log.info("reply superseded by newer messages; writing again", newer=len(more))
            written = await write(messages)
    except WriterFailed as exc:
        target, _ = split_burst(messages)
        failed = _record_for(target, ReplyState.FAILED, now(), channel)
        failed = failed.with_state(ReplyState.FAILED, attempts=exc.attempts, error=exc.last_error)
        await ledger.put(failed)
        reason = f"writer_failed after {exc.attempts} attempt(s): {exc.last_error}"
        await dead_letter(failed, reason, messages)
        log.error("reply dead-lettered", reason=reason, key=target.key)
        return BurstResult(Outcome.FAILED, target.key)
    target, covered = split_burst(messages)
    base = _record_for(target, ReplyState.PENDING, now(), channel)
    if isinstance(written, Decline):
        await ledger.put(base.with_state(ReplyState.DECLINED, reason=written.reason))
        await _cover(ledger, covered, target.key, now, channel)
        log.info("reply declined by the writer", reason=written.reason, key=target.key)
        return BurstResult(Outcome.DECLINED, target.key)
    record = base.with_state(ReplyState.PENDING, reply_text=written)
    await ledger.put(record)  # acknowledged before anything is sent
    return record, covered, messages


def _retrying(policy: SendPolicy) -> AsyncRetrying:
    """Retry what the send policy calls retryable, with random exponential backoff."""
    return AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_random_exponential(multiplier=policy.backoff_initial_s, max=policy.backoff_max_s),
        retry=retry_if_exception(
            lambda e: isinstance(e, SendError) and e.failure is SendFailure.RETRY
        ),
        reraise=True,
    )


async def _send(
    record: ReplyRecord,
    *,
    sender: MailSender,
    ledger: Ledger,
    dead_letter: DeadLetter,
    policy: SendPolicy,
    reconcile: bool,
    on_retry: Callable[[], None],
    may_retry: Callable[[], bool],
    burst: Sequence[Inbound],
    covered: int,
) -> BurstResult:
    """Send a recorded reply with its key, under the policy; a stale one reads the thread first."""
    ids = {"key": record.key, "inbox_id": record.inbox_id, "message_id": record.message_id}
    reconciled = not reconcile
    found: str | None = None
    attempts = 0
    try:
        async for attempt in _retrying(policy):
            with attempt:
                attempts += 1
                if attempts > 1:
                    if not may_retry():
                        raise Rebalancing(
                            f"a rebalance began while reply {record.key} was being retried "
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
        await dead_letter(failed, reason, burst)
        log.error("reply dead-lettered", reason=reason, attempts=attempts, **ids)
        return BurstResult(Outcome.FAILED, record.key)

    if found is not None:
        log.info("reply found in the thread; recorded as sent", sent=found, **ids)
        await ledger.put(record.with_state(ReplyState.SENT, sent_message_id=found))
        return BurstResult(Outcome.ALREADY, record.key, found)
    await ledger.put(record.with_state(ReplyState.SENT, sent_message_id=sent_id, attempts=attempts))
    log.info("reply sent", sent=sent_id, attempts=attempts, covered=covered, **ids)
    return BurstResult(Outcome.SENT, record.key, sent_id)


async def _cover(
    ledger: Ledger,
    covered: Iterable[Inbound],
    by: str,
    now: Callable[[], datetime],
    channel: str,
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
                message_at=message.occurred_at,
            )
        )
        log.info("message covered by the burst's reply", key=message.key, covered_by=by)

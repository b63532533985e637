"""Reply once: skips, the send policy, and :func:`reply_once`, which answers a burst.

The decisions are pure functions (those about bursts and ledger records in
:mod:`onceonly.processors.bursts`). :func:`reply_once` strings them together against
three small protocols (a ledger that acknowledges writes, a mail sender, a reply
writer), so it runs the same under the faust worker and in unit tests.

The order is the guarantee: the reply text and its idempotency key are recorded in the
ledger, and the broker has acknowledged them, *before* the email is sent with that key.
A crash anywhere resends the same text with the same key, which the mail API replays
instead of sending twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from onceonly.processors.bursts import (
    BurstResult,
    Outcome,
    Plan,
    already,
    divide,
    plan,
    split_burst,
    summarize,
)
from onceonly.processors.exceptions import Rebalancing, SendError, SendFailure, WriterFailed
from onceonly.processors.messages import Decline, Draft, Inbound, reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState

__all__ = [
    "BurstResult",
    "Inbound",
    "MailSender",
    "Outcome",
    "Plan",
    "ReplyWriter",
    "SendPolicy",
    "Skip",
    "plan",
    "reply_key",
    "reply_once",
    "simple_write",
    "split_burst",
]

log = structlog.get_logger("onceonly.reply")


class Skip(StrEnum):
    NOT_RECEIVED = "not_received"  #: an event type that is not an inbound message
    NOT_REAL_MAIL = "not_real_mail"  #: spam, blocked, unauthenticated
    OWN_MESSAGE = "own_message"  #: the agent's own outbound mail


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
#: the writer step: the messages so far -> the text, a Decline or a Draft; raises WriterFailed
Write = Callable[[Sequence[Inbound]], Awaitable[str | Decline | Draft]]
#: new messages of the thread that reached the worker meanwhile (claimed for this reply)
Newer = Callable[[], Awaitable[Sequence[Inbound]]]
DeadLetter = Callable[[ReplyRecord, str, Sequence[Inbound]], Awaitable[None]]


async def _nothing_newer() -> Sequence[Inbound]:
    return ()


def simple_write(writer: ReplyWriter) -> Write:
    """A plain callable as the writer step, with no policy (unit tests, tools)."""

    async def write(burst: Sequence[Inbound]) -> str | Decline | Draft:
        text = writer(burst)
        if inspect.isawaitable(text):
            text = await text
        if isinstance(text, Draft):
            return text
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


async def reply_once(
    burst: Sequence[Inbound],
    *,
    ledger: Ledger,
    sender: MailSender,
    write: Write,
    dead_letter: DeadLetter,
    now: Callable[[], datetime],
    policy: SendPolicy = SendPolicy(),
    replay: bool = False,
    on_retry: Callable[[], None] = lambda: None,
    channel: str = "agentmail",
    may_retry: Callable[[], bool] = lambda: True,
    newer: Newer = _nothing_newer,
    supersede_max: int = 2,
    on_superseded: Callable[[], None] = lambda: None,
    rewrite: Collection[str] = frozenset(),  # recorded, written again: a superseded draft's
) -> BurstResult:
    """Answer a burst of one thread's messages, each by a reply whose writer saw it.

    The burst is divided by the ledger (:func:`~onceonly.processors.bursts.divide`). A recorded
    *pending* reply is finished first, wherever its message is in the burst: the thread is
    read for it, and unless it is there it is sent with its stored text and key. The
    messages with no record get one reply, to the latest of them; if ``newer`` finds
    messages of the thread that reached the worker while the writer was composing, that
    text is not recorded: the writer is asked again with them too (at most
    ``supersede_max`` times), and the one reply goes to the latest. Returns the burst's
    result (:func:`~onceonly.processors.bursts.summarize`), with each reply's in ``parts``.
    """
    latest = ledger.get(split_burst(burst)[0].key)
    division = divide(
        [
            (m, Plan.WRITE if m.key in rewrite else plan(ledger.get(m.key), replay=replay))
            for m in burst
        ],
        latest.covers if latest is not None else None,
    )
    done = [_skipped(ledger, message, step) for message, step in division.done]
    send = _Sending(sender, ledger, dead_letter, policy, on_retry, may_retry)
    acted: list[BurstResult] = []
    if division.covered_by is not None:  # the latest message's pending reply saw them
        await _cover(ledger, division.cover, division.covered_by, now, channel)
    for message, _ in division.finish:
        record = ledger.get(message.key)
        assert record is not None
        covered = division.cover if message.key == division.covered_by else ()
        acted.append(await send(record, True, [*covered, message], len(covered)))
    if division.write:
        composing = (ledger, write, newer, supersede_max, on_superseded, now, channel)
        written = await _compose(division.write, *composing, dead_letter)
        if isinstance(written, BurstResult):
            acted.append(written)
        else:
            record, others, messages = written
            # the record's key, not the first target's: a rewrite answers the latest message
            await _cover(ledger, others, record.key, now, channel)
            acted.append(await send(record, False, messages, len(others)))
    return summarize(acted, done)


def _ids(record: ReplyRecord | Inbound) -> dict[str, str]:
    return {"key": record.key, "inbox_id": record.inbox_id, "message_id": record.message_id}


def _skipped(ledger: Ledger, message: Inbound, step: Plan) -> BurstResult:
    log.info("reply skipped: already handled", reason=step.value, **_ids(message))
    return already(message, step, ledger.get(message.key))


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
        declined = base.with_state(ReplyState.DECLINED, reason=written.reason, usage=written.usage)
        await ledger.put(declined)
        await _cover(ledger, covered, target.key, now, channel)
        log.info("reply declined by the writer", reason=written.reason, key=target.key)
        return BurstResult(Outcome.DECLINED, target.key)
    seen = tuple(m.key for m in covered)
    if isinstance(written, Draft):  # a person approves it first: recorded, not sent
        draft = dict(reply_text=written.text, reason=written.reason, covers=seen)
        await ledger.put(base.with_state(ReplyState.AWAITING, **draft))
        await _cover(ledger, covered, target.key, now, channel)
        log.info("reply drafted; awaiting approval", reason=written.reason, key=target.key)
        return BurstResult(Outcome.AWAITING, target.key)
    usage = getattr(
        written, "usage", None
    )  # the writer's reported cost (onceonly.processors.agent.Text)
    record = base.with_state(ReplyState.PENDING, reply_text=str(written), covers=seen, usage=usage)
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


@dataclass(frozen=True, slots=True)
class _Sending:
    """Sends a burst's recorded replies, under the send policy."""

    sender: MailSender
    ledger: Ledger
    dead_letter: DeadLetter
    policy: SendPolicy
    on_retry: Callable[[], None]
    may_retry: Callable[[], bool]

    async def __call__(
        self, record: ReplyRecord, reconcile: bool, burst: Sequence[Inbound], covered: int
    ) -> BurstResult:
        """Send ``record`` with its key (``reconcile``: read the thread for it first); record
        the outcome.

        ``burst``: the messages the reply answers, dead-lettered with it if it fails.
        """
        ids = _ids(record)
        reconciled = not reconcile
        found: str | None = None
        sent_id: str | None = None
        attempts = 0
        try:
            async for attempt in _retrying(self.policy):
                with attempt:
                    attempts += 1
                    if attempts > 1:
                        if not self.may_retry():
                            raise Rebalancing(
                                f"a rebalance began while reply {record.key} was being retried "
                                f"(attempt {attempts}); its next owner resumes it with the same key"
                            )
                        self.on_retry()
                        log.warning("send retry with the same key", attempt=attempts, **ids)
                    if not reconciled:
                        found = await self.sender.find_reply(record)
                        reconciled = True
                    if found is None:
                        sent_id, found = await _send_or_find(self.sender, record)
        except SendError as exc:
            reason = (
                f"{exc.failure.value} after {attempts} attempt(s): {exc}"
                if exc.failure is SendFailure.RETRY
                else f"{exc.failure.value}: {exc}"
            )
            failed = record.with_state(ReplyState.FAILED, attempts=attempts, error=str(exc))
            await self.ledger.put(failed)
            await self.dead_letter(failed, reason, burst)
            log.error("reply dead-lettered", reason=reason, attempts=attempts, **ids)
            return BurstResult(Outcome.FAILED, record.key)

        if found is not None:
            log.info("reply found in the thread; recorded as sent", sent=found, **ids)
            await self.ledger.put(record.with_state(ReplyState.SENT, sent_message_id=found))
            return BurstResult(Outcome.ALREADY, record.key, found)
        assert sent_id is not None
        sent = record.with_state(ReplyState.SENT, sent_message_id=sent_id, attempts=attempts)
        await self.ledger.put(sent)
        log.info("reply sent", sent=sent_id, attempts=attempts, covered=covered, **ids)
        return BurstResult(Outcome.SENT, record.key, sent_id)


async def send_recorded(record: ReplyRecord, reconcile: bool, **parts: Any) -> BurstResult:
    """Send a recorded *pending* reply (an approved draft) with its stored text and key;
    ``parts``: the sender, ledger, dead_letter, policy, on_retry and may_retry."""
    return await _Sending(**parts)(record, reconcile, (), 0)


async def _send_or_find(sender: MailSender, record: ReplyRecord) -> tuple[str | None, str | None]:
    """One send: (the sent id, None). A 409 key conflict means an email with this key exists
    (another owner sent it, with another text): (None, that reply) if the thread has it;
    without one in the thread the conflict stands, and is raised."""
    try:
        return await sender.reply(record), None
    except SendError as exc:
        if exc.failure is not SendFailure.CONFLICT:
            raise
        found = await sender.find_reply(record)
        if found is None:
            raise
        log.warning(
            "409 key conflict: another send with this key replied", sent=found, **_ids(record)
        )
        return None, found


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

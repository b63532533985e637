"""The send of a recorded reply: with its key, under the send policy, the thread read
first where the reply may be there already; its outcome recorded in the ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)

from onceonly.foundation.retries import retried
from onceonly.processors.exceptions import Rebalancing, SendError, SendFailure
from onceonly.processors.messages import FoundReply, Inbound
from onceonly.processors.reply.arbitration import Ruling
from onceonly.processors.reply.bursts import BurstResult, Outcome
from onceonly.processors.reply.parts import MailSender, SendParts, SendPolicy, log_ids
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.reply")


def give_up(policy: SendPolicy, failure: SendFailure, attempts: int, elapsed_s: float) -> bool:
    """Whether the send stops retrying after ``attempts`` calls over ``elapsed_s``, the last
    of which failed with ``failure`` (a retryable one).

    A first send still in flight is waited for up to the policy's in-flight wait, past
    ``attempts``; any other retryable failure stops at ``attempts``.
    """
    if failure is SendFailure.IN_FLIGHT:
        return elapsed_s >= policy.in_flight_wait_s
    return attempts >= policy.attempts


def _retrying(policy: SendPolicy, monotonic: Callable[[], float], started: float) -> AsyncRetrying:
    """Retry what the send policy calls retryable, with random exponential backoff; the
    in-flight wait is measured on ``monotonic`` from ``started``, the first attempt's."""

    def stop(state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        failure = exc.failure if isinstance(exc, SendError) else SendFailure.RETRY
        return give_up(policy, failure, state.attempt_number, monotonic() - started)

    return AsyncRetrying(
        stop=stop,
        wait=wait_random_exponential(multiplier=policy.backoff_initial_s, max=policy.backoff_max_s),
        retry=retry_if_exception(lambda e: isinstance(e, SendError) and e.retryable),
        reraise=True,
    )


@dataclass(frozen=True, slots=True)
class Sending:
    """Sends a burst's recorded replies, under the send policy."""

    parts: SendParts

    async def __call__(
        self,
        record: ReplyRecord,
        reconcile: bool,
        burst: Sequence[Inbound],
        covered: int,
        *,
        arbitrated: bool = False,
    ) -> BurstResult:
        """Send ``record`` with its key (``reconcile``: read the thread for it first); record
        the outcome.

        ``burst``: the messages the reply answers, dead-lettered with it if it fails.
        ``arbitrated``: ``record`` is what :meth:`arbitrate` ruled is sent.
        """
        ids = log_ids(record)
        if record.state is ReplyState.PENDING and not arbitrated:
            record, result = await self.arbitrate(record)
            if result is not None:
                return result
        reconciled = not reconcile
        found: str | None = None
        sent_id: str | None = None
        attempts = 0
        parts = self.parts
        started = parts.monotonic()

        async def attempt() -> None:
            nonlocal attempts, reconciled, found, sent_id
            attempts += 1
            if attempts > 1:
                if not parts.may_retry():
                    raise Rebalancing(
                        f"a rebalance began while reply {record.key} was being retried "
                        f"(attempt {attempts}); its next owner resumes it with the same key"
                    )
                parts.on_retry()
                log.warning("send retry with the same key", attempt=attempts, **ids)
            if not reconciled:
                found = await parts.sender.find_reply(record)
                reconciled = True
            if found is None:
                sent_id, found = await _send_or_find(parts.sender, record)

        try:
            await retried(lambda: _retrying(parts.policy, parts.monotonic, started), attempt)
        except SendError as exc:
            found = await self._sent_after_all(record, exc)
            if found is None:
                return await self._failed(record, exc, attempts, burst)

        if found is not None:
            log.info("reply found in the thread; recorded as sent", sent=found, **ids)
            await self.parts.ledger.put(as_found(record, found))
            return BurstResult(Outcome.ALREADY, record.key, found)
        assert sent_id is not None
        sent = record.with_state(ReplyState.SENT, sent_message_id=sent_id, attempts=attempts)
        await self.parts.ledger.put(sent)
        log.info("reply sent", sent=sent_id, attempts=attempts, covered=covered, **ids)
        return BurstResult(Outcome.SENT, record.key, sent_id)

    async def _sent_after_all(self, record: ReplyRecord, exc: SendError) -> str | None:
        """After the last retryable failure, the thread read once more: an answer lost
        after the request took effect (a 5xx, a dropped connection) may have sent the
        email, and a reply recorded failed and dead-lettered would then say otherwise (the
        simulator's finding F5). None where it is not there, or cannot be read."""
        if not exc.retryable:
            return None
        try:
            return await self.parts.sender.find_reply(record)
        except Exception as read:  # the failure stands: the dead letter says what failed
            log.warning("thread not read after a failed send", error=repr(read), **log_ids(record))
            return None

    async def _failed(
        self, record: ReplyRecord, exc: SendError, attempts: int, burst: Sequence[Inbound]
    ) -> BurstResult:
        reason = (
            f"{exc.failure.value} after {attempts} attempt(s): {exc}"
            if exc.retryable
            else f"{exc.failure.value}: {exc}"
        )
        failed = record.with_state(ReplyState.FAILED, attempts=attempts, error=str(exc))
        # the letter first: a worker stopped between the two leaves the letter (its retry
        # finds the key settled, or writes it), never a failed record with no letter, which
        # every redelivery skips as done (the simulator's finding F33)
        await self.parts.dead_letter(failed, reason, burst)
        await self.parts.ledger.put(failed)
        if exc.retryable:  # a timeout or a lost answer may have sent it: read again later
            self.parts.unsettled(failed, self.parts.sender)
        log.error("reply dead-lettered", reason=reason, attempts=attempts, **log_ids(record))
        return BurstResult(Outcome.FAILED, record.key)

    async def arbitrate(self, record: ReplyRecord) -> tuple[ReplyRecord, BurstResult | None]:
        """The reply that answers, by the ledger's arbitration: the record to send (this
        one, or another writer's pending text that came first) and None; or, where another
        writer recorded the reply sent first, that record and the outcome (nothing is
        sent). Either way the answering record's ``covers`` name what its writer saw."""
        ids = log_ids(record)
        verdict = await self.parts.arbitrate(record)
        if verdict.ruling in (Ruling.SENT, Ruling.SETTLED):
            theirs = verdict.record
            # (a table ledger wrote it already as the own record landed, unfenced; this
            # write is fenced: a worker whose partition moved stands down here)
            await self.parts.ledger.put(theirs)
            log.warning(
                f"reply recorded {theirs.state.value} by another writer first; nothing sent",
                sent=theirs.sent_message_id,
                **ids,
            )
            return theirs, BurstResult(Outcome.ALREADY, record.key, theirs.sent_message_id)
        if verdict.ruling is Ruling.ADOPT:
            log.warning("another writer's pending text came first; it is sent", **ids)
            await self.parts.ledger.put(verdict.record)  # the ledger holds what is sent
        return verdict.record, None


def as_found(record: ReplyRecord, found: str) -> ReplyRecord:
    """``record`` *sent* as the thread has it: with the thread's text where it holds
    another (a worker that woke after its partition moved may have recorded its own text
    after the owner's email went out: the ledger then says what the customer read)."""
    text = found.text if isinstance(found, FoundReply) else None
    sent = record.with_state(ReplyState.SENT, sent_message_id=str(found))
    if text is None or text.strip() == (record.reply_text or "").strip():
        return sent
    log.warning(
        "the thread holds another text than the ledger's; recorded the thread's",
        sent=str(found),
        **log_ids(record),
    )
    return replace(sent, reply_text=text)


async def send_recorded(record: ReplyRecord, reconcile: bool, parts: SendParts) -> BurstResult:
    """Send a recorded *pending* reply (an approved draft) with its stored text and key."""
    return await Sending(parts)(record, reconcile, (), 0)


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
            "409 key conflict: another send with this key replied", sent=found, **log_ids(record)
        )
        return None, found

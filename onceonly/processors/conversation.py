"""One conversation's work, for one job of its thread's lane: claim the deliveries (dedupe),
read their messages, reply once (or hand other events on), finish the dedupe entries.

The router (:mod:`onceonly.processors.router`) decides *when* a thread's deliveries are
worked on; this decides *what* is done with them. It reaches the rest of the worker only
through :class:`~onceonly.processors.parts.WorkerParts`, and each reply only through
:class:`~onceonly.processors.reply.parts.ReplyParts`. A record's failure is that record's:
whatever processing one raises is retried a bounded number of times, then dead-lettered
with the error, and the worker goes on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from onceonly.foundation import tracing
from onceonly.processors.approval import applying as approving
from onceonly.processors.approval import decisions as approvals
from onceonly.processors.dead_letters import for_reply
from onceonly.processors.dedupe import decisions as dedupe
from onceonly.processors.dedupe.claims import claim, finish
from onceonly.processors.effects.handlers import handle_event
from onceonly.processors.effects.once import Effects
from onceonly.processors.exceptions import BrokerUnavailable, Rebalancing, SendError
from onceonly.processors.flow import tenants
from onceonly.processors.lanes import Dropped, Job
from onceonly.processors.mail.protocol import MailProvider
from onceonly.processors.messages import Inbound, Skip
from onceonly.processors.parts import WorkerParts
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reorder.holds import log_ids as _ids
from onceonly.processors.reply.bursts import ended_failed
from onceonly.processors.reply.once import Outcome, SendPolicy, split_burst
from onceonly.processors.reply.parts import ReplyParts
from onceonly.processors.reply.retention import PAST_RETENTION, past_retention
from onceonly.schemas.dead_letter import Check
from onceonly.schemas.decision import Stage

log = structlog.get_logger("onceonly.worker")

#: how often one record's processing is tried before it is dead-lettered
RECORD_ATTEMPTS = 3


async def tried(
    act: Callable[[], Awaitable[None]],
    *,
    attempts: int,
    backoff_s: float,
    flowing: Callable[[], bool],
    on_retry: Callable[[int, Exception], None],
) -> Exception | None:
    """``act``, tried up to ``attempts`` times, ``backoff_s`` doubling between tries (not
    :func:`onceonly.foundation.retries.retried`: the rebalance and the broker away end it
    here, and the last failure is returned for the caller's dead letter): None
    once a try returns, else the last try's failure (the caller dead-letters its records).
    A rebalance ends it with :class:`Dropped` (the records are the next owner's): raised by
    ``act``, or begun (``flowing`` false) when a try failed. The broker away
    (:class:`BrokerUnavailable`) is not the records' failure: it is raised as it came, and
    the worker exits to read them again (no dead letter)."""
    for attempt in range(1, attempts + 1):
        try:
            await act()
            return None
        except (Dropped, BrokerUnavailable, asyncio.CancelledError):
            raise
        except Rebalancing as exc:
            raise Dropped(str(exc)) from exc
        except Exception as exc:
            if not flowing():
                raise Dropped(f"a rebalance began after {exc!r}") from exc
            if attempt == attempts:
                return exc
            on_retry(attempt, exc)
            await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
    raise ValueError(f"attempts must be at least 1, not {attempts}")


class Conversation:
    """The unit that owns a thread's work: claim, messages, reply, finish."""

    def __init__(self, parts: WorkerParts) -> None:
        self.parts = parts

    async def claim(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """The deliveries to act on: new events claimed in progress, duplicates skipped; a
        dead letter's retry that met its event in progress is dead-lettered again."""
        raced: list[Delivery] = []

        def skip(delivery: Delivery, verdict: str) -> None:
            self.parts.decisions.dedupe(delivery, verdict)
            if dedupe.raced(verdict, delivery.replay):
                raced.append(delivery)

        claimed = claim(
            self.parts.events,
            deliveries,
            now_ms=self.parts.now_ms(),
            metrics=self.parts.metrics,
            on_skip=skip,
            read_from=self.parts.read_from,
        )
        await self.retry_raced(raced, "another delivery of its event was being processed")
        return claimed

    async def retry_raced(self, deliveries: Sequence[Delivery], why: str) -> None:
        """Dead-letter again the retries (replays) that did not run because ``why``: their
        letters were closed by the retry, and the event's other delivery ends as before."""
        if not deliveries:
            return
        for delivery in deliveries:
            log.warning(
                "retry raced its event; dead-lettered again", why=why, **_ids(delivery.envelope)
            )
        error = f"the retry reached the worker while {why}; retry it again once that has ended"
        await self.dead_letter(deliveries, Check.RETRY_RACED, error)

    def finish(self, claimed: Sequence[Delivery], outcomes: dict[str, bool]) -> None:
        finish(self.parts.events, claimed, outcomes, now_ms=self.parts.now_ms())

    @tracing.processing
    async def process(
        self, job: Job, deliveries: Sequence[Delivery], *, key: bytes | None = None
    ) -> list[Delivery]:
        """Dedupe, act, record the outcome. Returns every delivery it took care of."""
        claimed = await self.claim(deliveries)
        taken = list(deliveries)
        if not claimed:
            return taken

        approval = self.parts.settings.approval != "never"

        def left_alone(delivery: Delivery) -> bool:
            """With approval on, a replayed message is left for a burst of its own: its key
            may end a chain of drafts covered by it, which only its own burst recalls (F15)."""
            return approval and delivery.replay

        async def newer() -> list[Inbound]:  # messages of the thread that came meanwhile
            if key is not None:
                held = self.parts.holds.take(key, now_ms=self.parts.now_ms(), window_ms=0)
                fresh = [d for d in held if not left_alone(d)]
                self.parts.holds.release_busy(key, [d for d in held if left_alone(d)])
            else:
                lane_key = claimed[0].envelope.thread_key.encode()
                waiting = [w for w in self.parts.lanes.queued(lane_key) if not left_alone(w.item)]
                self.parts.lanes.absorb(lane_key, job, waiting)
                fresh = [w.item for w in waiting]
            taken.extend(fresh)
            more = await self.claim(fresh)
            claimed.extend(more)
            return await self._inbounds(more, outcomes)

        outcomes: dict[str, bool] = {}
        await self._guarded(claimed, outcomes, newer)
        await self._still_ours()
        self.finish(claimed, outcomes)
        return taken

    async def _still_ours(self) -> None:
        """A worker that lost the partition meanwhile records no outcome for its events: the
        entry would land after the owner's and stand for it, and a dead letter's retry be
        skipped as the duplicate of a success that never was (simulator finding F16). The
        job is dropped; the records are the owner's."""
        if self.parts.fence is None:
            return
        try:
            await self.parts.fence.check("recording how the events ended")
        except Rebalancing as exc:
            raise Dropped(str(exc)) from exc

    async def _guarded(
        self, claimed: list[Delivery], outcomes: dict[str, bool], newer: Any
    ) -> None:
        """``act``, retried a bounded number of times; then the records are dead-lettered."""
        ids = _ids(claimed[0].envelope)

        def again(attempt: int, exc: Exception) -> None:
            log.warning("processing failed; trying again", attempt=attempt, error=repr(exc), **ids)

        failure = await tried(
            functools.partial(self.act, claimed, outcomes, newer),
            attempts=RECORD_ATTEMPTS,
            backoff_s=self.parts.retry_backoff_s,
            flowing=self.parts.flowing,
            on_retry=again,
        )
        if failure is None:
            return
        log.error("processing failed; dead-lettered", exc_info=failure, **ids)
        await self.dead_letter(claimed, Check.RECORD_FAILED, failure)
        for delivery in claimed:
            outcomes[delivery.envelope.event_id] = False

    async def dead_letter(
        self, deliveries: Sequence[Delivery], check: Check, error: BaseException | str
    ) -> None:
        """Dead-letter ``deliveries`` with ``check`` and the error (the router's too)."""
        envelopes = [d.envelope for d in deliveries]
        said = error if isinstance(error, str) else repr(error)
        await self.parts.dead_letters.record_failure(envelopes, check=check, error=said)

    async def _inbounds(
        self, claimed: Sequence[Delivery], outcomes: dict[str, bool]
    ) -> list[Inbound]:
        """The messages to answer among ``claimed`` (skips and fetch failures recorded)."""
        found: list[Inbound] = []
        for delivery in claimed:
            envelope = delivery.envelope
            ids = _ids(envelope)
            channel = self.parts.channels[envelope.provider]
            if self._past_retention(delivery):
                continue
            try:
                inbound = await channel.inbound(envelope)
            except SendError as exc:
                log.error("could not read the message from the mail API", error=str(exc), **ids)
                await self.parts.dead_letters.record_failure(
                    [envelope], check=Check.FETCH_FAILED, error=str(exc)
                )
                outcomes[envelope.event_id] = False
                continue
            if isinstance(inbound, Skip):
                self.parts.metrics.skips.labels(inbound.value).inc()
                log.info(
                    "message skipped", reason=inbound.value, message_id=envelope.message_id, **ids
                )
                self.parts.decisions.skipped(delivery, Stage.MESSAGE, inbound.value)
                continue
            found.append(inbound)
        return found

    def _past_retention(self, delivery: Delivery) -> bool:
        """A message older than ONCEONLY_LEDGER_RETENTION is never answered: its reply's
        ledger record may have been removed (onceonly.processors.reply.retention)."""
        envelope = delivery.envelope
        horizon = self.parts.settings.ledger_retention
        if not past_retention(envelope.occurred_at, self.parts.now(), horizon):
            return False
        self.parts.metrics.skips.labels(PAST_RETENTION).inc()
        log.warning(
            "message skipped: older than the ledger's retention, it may have been answered",
            reason=PAST_RETENTION,
            message_id=envelope.message_id,
            message_at=envelope.occurred_at.isoformat(),
            retention_s=horizon.total_seconds(),
            replay=delivery.replay,
            **_ids(envelope),
        )
        detail = f"message of {envelope.occurred_at.isoformat()}, retention {horizon}"
        self.parts.decisions.skipped(delivery, Stage.LEDGER, PAST_RETENTION, detail)
        return True

    async def act(
        self, claimed: Sequence[Delivery], outcomes: dict[str, bool], newer: Any = None
    ) -> None:
        """Reply once to the answerable messages (one thread's); hand other events on."""
        mail = [d for d in claimed if d.envelope.provider in self.parts.channels]
        for delivery in claimed:
            if delivery.envelope.provider not in self.parts.channels:
                outcomes[delivery.envelope.event_id] = await self.handle_event(delivery)
        if not mail:
            return
        # the ledger partition read as its last owner left it before its records are acted
        # on (a recovered late record, written again: the simulator's findings F38, F39)
        await self.parts.ledger.take_overs.once(mail[0].position[0])
        provider = mail[0].envelope.provider
        channel = self.parts.channels[provider]
        burst = await self._inbounds(mail, outcomes)
        if not burst:
            return
        settings = self.parts.settings  # whose turn the writer call waits for:
        tenants.set_tenant(settings.tenant_key, mail[0].envelope, burst[-1].inbox_id)
        answering = {m.event_id for m in burst}  # what the reply answers, and so fails with
        recorded: list[Inbound] = []  #: newer messages with a ledger record of their own

        async def newer_here() -> list[Inbound]:
            more = await newer() if newer is not None else []
            mine = [m for m in more if m.thread_key == burst[0].thread_key]
            # A newer message the ledger already has (a reply a killed worker recorded
            # *pending*) is not taken into this reply, nor dropped: it is finished alone.
            recorded.extend(m for m in mine if self.parts.ledger.get(m.key) is not None)
            mine = [m for m in mine if self.parts.ledger.get(m.key) is None]
            answering.update(m.event_id for m in mine)
            return mine

        ok = await self._reply(channel, burst, claimed, answering, newer_here)
        for message in recorded:
            alone = {message.event_id}
            outcomes[message.event_id] = await self._reply(channel, [message], claimed, alone)
        for message in (*burst, *recorded):  # a reply that ended failed fails its event
            if ended_failed(self.parts.ledger.get(message.key)):
                outcomes[message.event_id] = False
        for delivery in claimed:  # a skipped message succeeded, whatever the reply did
            event_id = delivery.envelope.event_id
            if delivery.envelope.provider == provider:
                outcomes.setdefault(event_id, ok or event_id not in answering)

    async def _reply(
        self,
        channel: MailProvider,
        burst: Sequence[Inbound],
        claimed: Sequence[Delivery],
        answering: set[str],
        newer: Any = None,
    ) -> bool:
        """One reply to ``burst`` (:func:`~onceonly.processors.approval.applying.answer`); False
        if it failed."""
        sender = self.parts.fence.sender(channel.sender) if self.parts.fence else channel.sender
        parts = self.parts
        reply = ReplyParts(
            ledger=parts.ledger,
            sender=tracing.traced_sender(sender),
            write=functools.partial(self.write, channel),
            dead_letter=for_reply(
                parts.dead_letters,
                lambda: (d.envelope for d in claimed),
                # a superseded draft's messages, recalled from the thread: made again
                lambda unclaimed: approving.again(
                    parts, approving.recorded(parts.ledger, unclaimed)
                ),
            ),
            now=parts.now,
            policy=SendPolicy(
                attempts=parts.settings.send_attempts,
                in_flight_wait_s=parts.settings.send_in_flight_wait_s,
            ),
            replay=any(d.replay for d in claimed),
            on_retry=parts.metrics.send_retries.inc,
            may_retry=parts.flowing,
            arbitrate=parts.ledger.arbitrate,
            unsettled=parts.late_sends.failed,
            channel=channel.name,
            **({"newer": newer} if newer is not None else {}),
            supersede_max=parts.settings.supersede_max,
            on_superseded=parts.metrics.superseded.inc,
        )
        result = await approving.answer(parts, burst, reply)
        if result.outcome is Outcome.SENT:  # a burst may answer in more than one reply
            self.parts.metrics.replies.inc(
                sum(p.outcome is Outcome.SENT for p in result.parts) or 1
            )
        elif result.outcome is Outcome.DECLINED:
            self.parts.metrics.skips.labels("declined").inc()
        if result.outcome in (Outcome.ALREADY, Outcome.DECLINED):
            answered = [d for d in claimed if d.envelope.event_id in answering]
            self.parts.decisions.ledger_skip(self.parts.ledger.get(result.key), result, answered)
        return result.outcome is not Outcome.FAILED

    async def write(self, channel: MailProvider, messages: Sequence[Inbound]) -> Any:
        """The writer step for a burst: its effects and history are the latest message's."""
        target, _ = split_burst(messages)
        effects = Effects(
            target.key, self.parts.ledger, self.parts.now, loop=asyncio.get_running_loop()
        )
        with tracing.writing(target.key):
            written = await self.parts.writer.write(
                messages,
                effects=effects,
                history=lambda: channel.history(target),
                ids={"key": target.key, "message_id": target.message_id},
            )
        return approvals.by_mode(self.parts.settings.approval, written)

    async def handle_event(self, delivery: Delivery) -> bool:
        """Hand a non-mail event to ONCEONLY_EVENT_HANDLER with an effect ledger."""
        return await handle_event(self.parts, delivery)

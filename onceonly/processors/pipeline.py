"""What the worker does with each record: faust only feeds :meth:`Pipeline.admit`.

A record is routed, not processed, by the agent loop: a delivery is held in its
thread's reorder buffer (or, with a window of 0, queued on its thread's lane), a tick
queues a release on each due thread's lane. Lanes (:mod:`onceonly.processors.lanes`) run each
thread's work in order and the threads concurrently, so the loop never waits for a
model. A record's failure is that record's: whatever processing one raises is retried a
bounded number of times, then dead-lettered with the error, and the worker goes on.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from onceonly.foundation import tracing
from onceonly.foundation.settings import Settings
from onceonly.processors import approvals, approving, reorder, tenants
from onceonly.processors.agent import Writer
from onceonly.processors.claims import claim, finish
from onceonly.processors.dead_letters import DeadLetters, for_reply
from onceonly.processors.decisions import Decisions
from onceonly.processors.effects import Effects, EventHandler
from onceonly.processors.exceptions import Rebalancing, SendError
from onceonly.processors.faust_app import set_current
from onceonly.processors.fence import Fence
from onceonly.processors.handling import handle_event
from onceonly.processors.holds import Delivery, Holds, Verdict
from onceonly.processors.holds import log_ids as _ids
from onceonly.processors.lanes import Dropped, Job, Lanes
from onceonly.processors.mail.protocol import MailProvider
from onceonly.processors.messages import Inbound
from onceonly.processors.metrics import WorkerMetrics
from onceonly.processors.reply import Outcome, SendPolicy, Skip, split_burst
from onceonly.processors.sweep import Sweeper
from onceonly.schemas.decision import Stage
from onceonly.schemas.envelope import TICK_HEADER, Envelope, has_valid_mac
from onceonly.schemas.exceptions import SchemaError

log = structlog.get_logger("onceonly.worker")

Clock = Callable[[], float]  # epoch seconds

#: how often one record's processing is tried before it is dead-lettered
RECORD_ATTEMPTS = 3
BAD_MAC = (
    "the record has no valid onceonly-mac: forged, corrupted, or written without "
    "ONCEONLY_ENVELOPE_SECRET; it was not processed"
)


@dataclass
class Pipeline:
    """Dedupe, reorder and reply once, over the worker's tables and lanes."""

    settings: Settings
    events: Any  #: faust Table ``events``: dedupe entries, bytes -> bytes
    holds: Holds
    ledger: Any  #: TableLedger
    channels: dict[str, MailProvider]
    writer: Writer
    dead_letters: DeadLetters
    deliveries: Any  #: faust Topic, for ticks
    metrics: WorkerMetrics
    lanes: Lanes
    sweeper: Sweeper
    handler: EventHandler | None = None
    clock: Clock = time.time
    #: partition -> when its last tick was sent and not yet seen; a tick can be lost to a
    #: rebalance (another worker reads it), so one older than ``retick_s`` is sent again
    _ticking: dict[int, float] = field(default_factory=dict)
    retick_s: float = 2.0
    #: thread keys with a release queued or running on their lane
    _releasing: set[bytes] = field(default_factory=set)
    #: False while a rebalance is under way (faust has stopped the flow of records)
    flowing: Callable[[], bool] = lambda: True
    retry_backoff_s: float = 0.5
    #: ONCEONLY_ENVELOPE_SECRET: records without a valid MAC are dead-lettered, never processed
    mac_key: bytes | None = None
    #: the decisions topic: each skip, written off the ack path (none: written nowhere)
    decisions: Decisions = field(default_factory=Decisions)
    fence: Fence | None = None  #: checked before each send (the ledger fences its writes)

    @property
    def window_ms(self) -> int:
        return int(self.settings.reorder_window_ms)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), tz=UTC)

    # -- the agent loop: route each record ------------------------------------------
    async def admit(self, event: Any) -> None:
        """Route one record; returns without waiting for any model or send."""
        message = event.message
        headers = dict(message.headers or ())
        partition, offset = int(message.partition), int(message.offset)
        set_current(event)
        if TICK_HEADER in headers:
            self._ticking.pop(partition, None)
            await self.on_tick(partition, event)
            await self.lanes.ack_now(event)
            return
        if approving.APPROVAL_HEADER in headers:  # a person's decision on a draft
            return await approving.admit(self, event)
        if self.mac_key is not None and not has_valid_mac(
            event.value, message.headers or (), self.mac_key
        ):
            log.error(
                "record without a valid MAC; dead-lettered", partition=partition, offset=offset
            )
            await self.dead_letters.record_unreadable(
                event.value, partition, offset, BAD_MAC, "bad_mac"
            )
            await self.lanes.ack_now(event)
            return
        try:
            envelope = Envelope.decode(event.value)
        except (SchemaError, RecursionError) as exc:
            log.error(
                "record is not an envelope; dead-lettered",
                partition=partition,
                offset=offset,
                error=str(exc),
            )
            await self.dead_letters.record_unreadable(event.value, partition, offset, str(exc))
            await self.lanes.ack_now(event)
            return
        delivery = Delivery.of(envelope, (partition, offset), headers)
        key = envelope.thread_key.encode()
        if self.window_ms == 0:
            await self.lanes.submit(key, Job(self._deliver, [event], item=delivery))
        else:
            await self._hold(event, key, delivery)
        self.sweeper.maybe_sweep(partition)

    async def _hold(self, event: Any, key: bytes, delivery: Delivery) -> None:
        envelope = delivery.envelope
        try:
            verdict = self.holds.hold(delivery, now_ms=self.now_ms())
        except Exception as exc:  # an odd envelope (a date out of range): dead-letter it
            await self._dead_letter_deliveries([delivery], "record_failed", exc)
            verdict = Verdict.HELD
        if verdict is Verdict.FULL:  # too large to hold: processed now, not reordered
            log.warning("thread buffer full; delivery processed at once", **_ids(envelope))
            await self.lanes.submit(key, Job(self._deliver, [event], item=delivery))
            return
        if verdict is Verdict.REPEAT:
            self.metrics.duplicates.labels("duplicate").inc()
            log.info("delivery skipped", verdict="duplicate", held=True, **_ids(envelope))
            self.decisions.skipped(delivery, Stage.HOLD, "duplicate")
        await self.lanes.ack_now(event)  # durable in the holds table (or dead-lettered)

    async def on_tick(self, partition: int, event: Any) -> None:
        """Queue a release on the lane of each thread of ``partition`` that is due."""
        for key in self.holds.due_keys(partition, now_ms=self.now_ms(), skip=self._releasing):
            self._releasing.add(key)
            await self.lanes.submit(key, Job(self._release, [], kind="release", item=(key, event)))

    async def tick(self) -> None:
        """The timer: a tick record to each partition that holds a due buffer."""
        now = self.clock()
        due = self.holds.due_partitions(now_ms=self.now_ms())
        for partition in reorder.ticks_due(due, self._ticking, now=now, retick_s=self.retick_s):
            self._ticking[partition] = now
            await self.deliveries.send(value=b"", partition=partition, headers={TICK_HEADER: b"1"})

    def forget_state(self) -> None:
        """The partitions changed (or are changing): read the held buffers again."""
        self.holds.forget()
        self._releasing.clear()
        self._ticking.clear()

    # -- a lane's jobs ----------------------------------------------------------------
    async def _deliver(self, job: Job) -> None:
        """Window 0: one delivery, as it came."""
        set_current(job.records[0])
        await self.process(job, [job.item])

    async def _release(self, job: Job) -> None:
        """A due thread's held events, released together in payload order."""
        key, tick = job.item
        set_current(tick)
        taken: list[Delivery] = []
        try:
            taken = self.holds.take(key, now_ms=self.now_ms())
            if not taken:
                return
            done = await self.process(job, taken, key=key)
            self.holds.settle(key, done, now_ms=self.now_ms())
        except BaseException:
            self.holds.release_busy(key, taken)
            raise
        finally:
            self._releasing.discard(key)

    # -- one thread's released events -----------------------------------------------
    def claim(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """The deliveries to act on: new events claimed in progress, duplicates skipped."""
        skip = self.decisions.dedupe
        return claim(
            self.events, deliveries, now_ms=self.now_ms(), metrics=self.metrics, on_skip=skip
        )

    def finish(self, claimed: Sequence[Delivery], outcomes: dict[str, bool]) -> None:
        finish(self.events, claimed, outcomes, now_ms=self.now_ms())

    @tracing.processing
    async def process(
        self, job: Job, deliveries: Sequence[Delivery], *, key: bytes | None = None
    ) -> list[Delivery]:
        """Dedupe, act, record the outcome. Returns every delivery it took care of."""
        claimed = self.claim(deliveries)
        taken = list(deliveries)
        if not claimed:
            return taken

        async def newer() -> list[Inbound]:  # messages of the thread that came meanwhile
            if key is not None:
                fresh = self.holds.take(key, now_ms=self.now_ms(), window_ms=0)
            else:
                lane_key = claimed[0].envelope.thread_key.encode()
                waiting = self.lanes.queued(lane_key)
                self.lanes.absorb(lane_key, job, waiting)
                fresh = [w.item for w in waiting]
            taken.extend(fresh)
            more = self.claim(fresh)
            claimed.extend(more)
            return await self._inbounds(more, outcomes)

        outcomes: dict[str, bool] = {}
        await self._guarded(claimed, outcomes, newer)
        self.finish(claimed, outcomes)
        return taken

    async def _guarded(
        self, claimed: list[Delivery], outcomes: dict[str, bool], newer: Any
    ) -> None:
        """``act``, retried a bounded number of times; then the records are dead-lettered."""
        for attempt in range(1, RECORD_ATTEMPTS + 1):
            try:
                await self.act(claimed, outcomes, newer)
                return
            except (Dropped, asyncio.CancelledError):
                raise
            except Rebalancing as exc:
                raise Dropped(str(exc)) from exc
            except Exception as exc:
                if not self.flowing():
                    raise Dropped(f"a rebalance began after {exc!r}") from exc
                if attempt < RECORD_ATTEMPTS:
                    log.warning(
                        "processing failed; trying again",
                        attempt=attempt,
                        error=repr(exc),
                        **_ids(claimed[0].envelope),
                    )
                    await asyncio.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
                    continue
                log.exception("processing failed; dead-lettered", **_ids(claimed[0].envelope))
                await self._dead_letter_deliveries(claimed, "record_failed", exc)
                for delivery in claimed:
                    outcomes[delivery.envelope.event_id] = False

    async def _dead_letter_deliveries(
        self, deliveries: Sequence[Delivery], check: str, exc: BaseException
    ) -> None:
        envelopes = [d.envelope for d in deliveries]
        await self.dead_letters.record_failure(envelopes, check=check, error=repr(exc))

    async def _inbounds(
        self, claimed: Sequence[Delivery], outcomes: dict[str, bool]
    ) -> list[Inbound]:
        """The messages to answer among ``claimed`` (skips and fetch failures recorded)."""
        found: list[Inbound] = []
        for delivery in claimed:
            envelope = delivery.envelope
            ids = _ids(envelope)
            channel = self.channels[envelope.provider]
            try:
                inbound = await channel.inbound(envelope)
            except SendError as exc:
                log.error("could not read the message from the mail API", error=str(exc), **ids)
                await self.dead_letters.record_failure(
                    [envelope], check="fetch_failed", error=str(exc)
                )
                outcomes[envelope.event_id] = False
                continue
            if isinstance(inbound, Skip):
                self.metrics.skips.labels(inbound.value).inc()
                log.info(
                    "message skipped", reason=inbound.value, message_id=envelope.message_id, **ids
                )
                self.decisions.skipped(delivery, Stage.MESSAGE, inbound.value)
                continue
            found.append(inbound)
        return found

    async def act(
        self, claimed: Sequence[Delivery], outcomes: dict[str, bool], newer: Any = None
    ) -> None:
        """Reply once to the answerable messages (one thread's); hand other events on."""
        mail = [d for d in claimed if d.envelope.provider in self.channels]
        for delivery in claimed:
            if delivery.envelope.provider not in self.channels:
                outcomes[delivery.envelope.event_id] = await self.handle_event(delivery)
        if not mail:
            return
        provider = mail[0].envelope.provider
        channel = self.channels[provider]
        burst = await self._inbounds(mail, outcomes)
        if not burst:
            return
        tenants.set_tenant(self.settings, mail[0].envelope, burst[-1])  # whose turn
        answering = {m.event_id for m in burst}  # what the reply answers, and so fails with
        recorded: list[Inbound] = []  #: newer messages with a ledger record of their own

        async def newer_here() -> list[Inbound]:
            more = await newer() if newer is not None else []
            mine = [m for m in more if m.thread_key == burst[0].thread_key]
            # A newer message the ledger already has (a reply a killed worker recorded
            # *pending*) is not taken into this reply, nor dropped: it is finished alone.
            recorded.extend(m for m in mine if self.ledger.get(m.key) is not None)
            mine = [m for m in mine if self.ledger.get(m.key) is None]
            answering.update(m.event_id for m in mine)
            return mine

        ok = await self._reply(channel, burst, claimed, answering, newer_here)
        for message in recorded:
            alone = {message.event_id}
            outcomes[message.event_id] = await self._reply(channel, [message], claimed, alone)
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
        """One reply to ``burst`` (:func:`~onceonly.processors.approving.answer`); False if it
        failed."""
        sender = self.fence.sender(channel.sender) if self.fence else channel.sender
        result = await approving.answer(
            self,
            burst,
            ledger=self.ledger,
            sender=tracing.traced_sender(sender),
            write=functools.partial(self.write, channel),
            dead_letter=for_reply(self.dead_letters, lambda: (d.envelope for d in claimed)),
            now=self.now,
            policy=SendPolicy(attempts=self.settings.send_attempts),
            replay=any(d.replay for d in claimed),
            on_retry=self.metrics.send_retries.inc,
            may_retry=self.flowing,
            channel=channel.name,
            **({"newer": newer} if newer is not None else {}),
            supersede_max=self.settings.supersede_max,
            on_superseded=self.metrics.superseded.inc,
        )
        if result.outcome is Outcome.SENT:  # a burst may answer in more than one reply
            self.metrics.replies.inc(sum(p.outcome is Outcome.SENT for p in result.parts) or 1)
        elif result.outcome is Outcome.DECLINED:
            self.metrics.skips.labels("declined").inc()
        if result.outcome in (Outcome.ALREADY, Outcome.DECLINED):
            answered = [d for d in claimed if d.envelope.event_id in answering]
            self.decisions.ledger_skip(self.ledger.get(result.key), result, answered)
        return result.outcome is not Outcome.FAILED

    async def write(self, channel: MailProvider, messages: Sequence[Inbound]) -> Any:
        """The writer step for a burst: its effects and history are the latest message's."""
        target, _ = split_burst(messages)
        effects = Effects(target.key, self.ledger, self.now, loop=asyncio.get_running_loop())
        with tracing.writing(target.key):
            written = await self.writer.write(
                messages,
                effects=effects,
                history=lambda: channel.history(target),
                ids={"key": target.key, "message_id": target.message_id},
            )
        return approvals.by_mode(self.settings.approval, written)

    async def handle_event(self, delivery: Delivery) -> bool:
        """Hand a non-mail event to ONCEONLY_EVENT_HANDLER with an effect ledger."""
        return await handle_event(self, delivery)

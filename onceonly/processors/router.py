"""The router: what the agent loop does with each record. The runtime only feeds
:meth:`Router.admit`.

A record is routed, not processed: a delivery is held in its thread's reorder buffer
(or, with a window of 0, queued on its thread's lane), a tick queues a release on each
due thread's lane, a person's decision on a draft goes to its thread's lane. Lanes
(:mod:`onceonly.processors.lanes`) run each thread's work in order and the threads
concurrently, so the loop never waits for a model; the work itself is a
:class:`~onceonly.processors.conversation.Conversation`'s.
"""

from __future__ import annotations

import structlog

from onceonly.processors.approval import applying as approving
from onceonly.processors.conversation import Conversation
from onceonly.processors.lanes import Job, Refused
from onceonly.processors.parts import WorkerParts
from onceonly.processors.records import Record
from onceonly.processors.reorder import window as reorder
from onceonly.processors.reorder.holds import Delivery, Verdict
from onceonly.processors.reorder.holds import log_ids as _ids
from onceonly.schemas.dead_letter import Check
from onceonly.schemas.decision import Stage
from onceonly.schemas.envelope import TICK_HEADER, Envelope, has_valid_mac
from onceonly.schemas.exceptions import SchemaError

log = structlog.get_logger("onceonly.worker")

BAD_MAC = (
    "the record has no valid onceonly-mac: forged, corrupted, or written without "
    "ONCEONLY_ENVELOPE_SECRET; it was not processed"
)


class Router:
    """Admit, hold, tick, forget: when each thread's deliveries are worked on."""

    def __init__(self, parts: WorkerParts, *, retick_s: float = 2.0) -> None:
        self.parts = parts
        self.conversation = Conversation(parts)
        #: partition -> when its last tick was sent and not yet seen; a tick can be lost to
        #: a rebalance (another worker reads it), so one older than ``retick_s`` is resent
        self._ticking: dict[int, float] = {}
        self.retick_s = retick_s
        #: thread keys with a release queued or running on their lane
        self._releasing: set[bytes] = set()

    @property
    def window_ms(self) -> int:
        return int(self.parts.settings.reorder_window_ms)

    # -- the agent loop: route each record ------------------------------------------
    async def admit(self, event: Record) -> None:
        """Route one record; returns without waiting for any model or send."""
        headers = {name: value for name, value in event.headers if value is not None}
        partition, offset = event.partition, event.offset
        event.enter()
        if TICK_HEADER in headers:
            self._ticking.pop(partition, None)
            await self.on_tick(partition, event)
            await self.parts.lanes.ack_now(event)
            return
        if approving.APPROVAL_HEADER in headers:  # a person's decision on a draft
            return await approving.admit(self.parts, event)
        if self.parts.mac_key is not None and not has_valid_mac(
            event.value, event.headers, self.parts.mac_key
        ):
            log.error(
                "record without a valid MAC; dead-lettered", partition=partition, offset=offset
            )
            await self.parts.dead_letters.record_unreadable(
                event.value, partition, offset, BAD_MAC, Check.BAD_MAC
            )
            await self.parts.lanes.ack_now(event)
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
            await self.parts.dead_letters.record_unreadable(
                event.value, partition, offset, str(exc)
            )
            await self.parts.lanes.ack_now(event)
            return
        delivery = Delivery.of(envelope, (partition, offset), headers)
        key = envelope.thread_key.encode()
        if self.window_ms == 0:
            await self.parts.lanes.submit(key, Job(self._deliver, [event], item=delivery))
        else:
            await self._hold(event, key, delivery)
        self.parts.sweeper.maybe_sweep(partition)
        if self.parts.ledger_sweeper is not None:
            await self.parts.ledger_sweeper.maybe_sweep(partition)

    async def _hold(self, event: Record, key: bytes, delivery: Delivery) -> None:
        envelope = delivery.envelope
        try:
            verdict = self.parts.holds.hold(delivery, now_ms=self.parts.now_ms())
        except Exception as exc:  # an odd envelope (a date out of range): dead-letter it
            await self.conversation.dead_letter([delivery], Check.RECORD_FAILED, exc)
            verdict = Verdict.HELD
        if verdict is Verdict.FULL:  # too large to hold: processed now, not reordered
            log.warning("thread buffer full; delivery processed at once", **_ids(envelope))
            await self.parts.lanes.submit(key, Job(self._deliver, [event], item=delivery))
            return
        if verdict is Verdict.REPEAT:
            self.parts.metrics.duplicates.labels("duplicate").inc()
            log.info("delivery skipped", verdict="duplicate", held=True, **_ids(envelope))
            self.parts.decisions.skipped(delivery, Stage.HOLD, "duplicate")
            if delivery.replay:  # a retry whose event is held: it ends as its letter said
                why = "its event was held for its thread's window"
                await self.conversation.retry_raced([delivery], why)
        landing = self.parts.holds.landing(key)  # held, or held already (written again)
        if landing is not None:  # acknowledged once the holds' changelog has it (F40)
            refused = self._refused(event, key, delivery, verdict)
            self.parts.lanes.ack_landed(event, landing, refused=refused)
            return
        await self.parts.lanes.ack_now(event)  # dead-lettered (or no write to wait for)

    def _refused(self, event: Record, key: bytes, delivery: Delivery, verdict: Verdict) -> Refused:
        """What becomes of a delivery whose hold the broker refused (too large for the holds
        changelog, say): processed at once, not reordered, as a full buffer's; a retry met
        by its event held is done (dead-lettered again: ``retry_raced``)."""

        async def refused(exc: BaseException) -> None:
            ids = _ids(delivery.envelope)
            if verdict is Verdict.REPEAT and delivery.replay:
                log.warning("the broker refused a retry's hold; its letter stands", **ids)
                await self.parts.lanes.ack_now(event)
                return
            why = "the broker refused the delivery's hold; processed at once, not reordered"
            log.warning(why, error=repr(exc), **ids)
            await self.parts.lanes.submit(key, Job(self._deliver, [event], item=delivery))

        return refused

    async def on_tick(self, partition: int, event: Record) -> None:
        """Queue a release on the lane of each thread of ``partition`` that is due."""
        for key in self.parts.holds.due_keys(
            partition, now_ms=self.parts.now_ms(), skip=self._releasing
        ):
            self._releasing.add(key)
            await self.parts.lanes.submit(
                key, Job(self._release, [], kind="release", item=(key, event))
            )

    async def tick(self) -> None:
        """The timer: a tick record to each partition that holds a due buffer."""
        now = self.parts.clock()
        due = self.parts.holds.due_partitions(now_ms=self.parts.now_ms())
        for partition in reorder.ticks_due(due, self._ticking, now=now, retick_s=self.retick_s):
            self._ticking[partition] = now
            await self.parts.deliveries.send(
                value=b"", partition=partition, headers={TICK_HEADER: b"1"}
            )

    def forget_state(self) -> None:
        """The partitions changed (or are changing): read the held buffers again, and
        account for the ledger's offsets afresh."""
        self.parts.holds.forget()
        self.parts.ledger.forget()
        self._releasing.clear()
        self._ticking.clear()

    # -- a lane's jobs ----------------------------------------------------------------
    async def _deliver(self, job: Job) -> None:
        """Window 0: one delivery, as it came."""
        job.records[0].enter()
        await self.conversation.process(job, [job.item])

    async def _release(self, job: Job) -> None:
        """A due thread's held events, released together in payload order."""
        key, tick = job.item
        tick.enter()
        taken: list[Delivery] = []
        try:
            taken = self.parts.holds.take(key, now_ms=self.parts.now_ms())
            if not taken:
                return
            done = await self.conversation.process(job, taken, key=key)
            self.parts.holds.settle(key, done, now_ms=self.parts.now_ms())
        except BaseException:
            self.parts.holds.release_busy(key, taken)
            raise
        finally:
            self._releasing.discard(key)

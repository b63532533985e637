"""The faust worker: a thin loop around dedupe, reorder and reply-once.

One agent (concurrency 1) reads the deliveries topic in batches
(``ONCEONLY_BATCH_MAX`` records, waiting at most ``ONCEONLY_BATCH_WAIT_MS``). A batch is
split by partition, and each partition's records by thread (the record's key, which
ingest sets to the thread key): each thread's records run in order, one after the other,
and the threads run concurrently, so one conversation's broker acks and mail calls
overlap another's. Order is kept where it matters, within a conversation; a tick (which
releases held events of the whole partition) runs alone, after the records before it and
before the records after it. faust acks a batch's records only once the whole batch is
done.

Three changelog-backed RocksDB tables, all written with the record's own event current,
so each write lands in the store and changelog partition of the thread it belongs to:

* ``events``: dedupe entries keyed ``provider:event_id``;
* ``holds``: each thread's reorder buffer, so held events survive a crash (an event's
  offset is committed only once it is in this table, or processed);
* ``replies``: the reply ledger, whose changelog *is* the compacted ledger topic; its
  records go to the topic first and to the store once acknowledged (:class:`TableLedger`).

Held events are released by *ticks*: a timer sends an empty record, marked with the
``onceonly-tick`` header, to each partition that holds a due buffer. The agent meets
the tick in order, in that partition's context, and releases what is due.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import faust
import structlog
from faust.streams import _current_event
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP

from onceonly.lag import LagCollector
from processors import dedupe, reorder
from processors.channels import AgentMailChannel, Channel
from processors.effects import EffectConflict, Effects, EventHandler, run_handler
from processors.exceptions import Rebalancing, SendError
from processors.mail import AgentMailSender, DryRunOutbox
from processors.metrics import WorkerMetrics
from processors.nylas import nylas_channel
from processors.reply import Inbound, Outcome, ReplyWriter, SendPolicy, Skip, reply_once
from processors.writer import load_callable, load_writer
from schemas.envelope import REPLAY_HEADER, TICK_HEADER, Envelope
from schemas.exceptions import SchemaError
from schemas.ledger import EventEntry, ReplyRecord

log = structlog.get_logger("onceonly.worker")

Clock = Callable[[], float]  # epoch seconds


class RewindingConsumer(AIOKafkaConsumer):
    """faust's Kafka consumer, with a post-rebalance seek that brings back every dropped record.

    While tables recover, faust pauses the stream partitions in its own bookkeeping only:
    aiokafka goes on fetching them. When recovery pauses the changelog partitions again,
    the set of active partitions that faust hands to the consumer thread can be empty for
    a moment, and aiokafka, given no partition, returns the records of all of them: faust
    drops the stream partitions' records (not active) once aiokafka has moved past them.
    faust counts on the seek to the committed offsets that follows to read them again, and
    then clears the agents' queues. Two holes, each losing records with no error:

    * aiokafka's ``seek_to_committed`` leaves alone a partition with no committed offset
      (or one at 0): a partition whose last owner died before its first commit (commits
      come every few seconds) goes on past the dropped records, and later acks commit
      past them;
    * a record fetched after the seek, before the queues are cleared, is dropped too.

    So the flow stops before the seek (faust resumes it right after clearing the queues),
    and a stream partition with no committed offset goes where ``auto_offset_reset`` says.
    Records read again are duplicates, which the dedupe table and the ledger skip.
    """

    async def perform_seek(self) -> None:
        self.stop_flow()  # no record reaches a queue between the seek and the clear
        await super().perform_seek()

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        fresh = [
            TP(tp.topic, tp.partition)
            for tp, offset in committed.items()
            if (offset is None or offset <= 0) and self.app.topics.acks_enabled_for(tp.topic)
        ]
        reset = self.app.conf.consumer_auto_offset_reset
        if fresh and reset in ("earliest", "latest"):
            ends = await (
                self.earliest_offsets(*fresh) if reset == "earliest" else self.highwaters(*fresh)
            )
            await self.seek_wait({tp: o for tp, o in ends.items() if o is not None})
        return committed


class TableLedger:
    """The reply ledger over the ``replies`` table, whose changelog *is* the ledger topic.

    ``put`` writes the topic first and the worker's own store only once the broker has
    acknowledged the record. faust's table writes go the other way (store, then changelog,
    sent later): a SIGKILL in between left the store saying *sent* while the topic, which
    catch-up and any other owner of the partition read, said *pending* for good (46 of
    8,000 keys after four kills in a scratch run; the chaos runs' one pending key). In this
    order a crash can only leave the store behind the topic: the next owner sends again
    with the same key, which the mail API answers from its idempotency record.
    """

    def __init__(self, table: Any) -> None:
        self.table = table  # a faust Table: bytes -> bytes

    def get(self, key: str) -> ReplyRecord | None:
        raw = self.table.get(key.encode())
        return ReplyRecord.decode(raw) if raw is not None else None

    async def put(self, record: ReplyRecord) -> None:
        await self.put_raw(record.key, record.encode())

    def get_raw(self, key: str) -> bytes | None:
        raw = self.table.get(key.encode())
        return bytes(raw) if raw is not None else None

    async def put_raw(self, key: str, value: bytes) -> None:
        raw = key.encode()
        await self.table.send_changelog(self.table.partition_for_key(raw), raw, value)
        self.table.data[raw] = value  # the store alone: the topic has the record already


def by_partition(events: Iterable[Any]) -> list[list[Any]]:
    """A batch's records split by partition, each partition's in the order they came."""
    split: dict[int, list[Any]] = {}
    for event in events:
        split.setdefault(int(event.message.partition), []).append(event)
    return list(split.values())


def by_thread(events: Iterable[Any]) -> list[list[list[Any]]]:
    """One partition's records as stages that run one after the other; a stage is a list
    of per-thread sequences (by record key) that may run concurrently, each in order.

    A tick record is a stage of its own: it releases held events of any thread of the
    partition, so nothing else of the partition may run beside it.
    """
    stages: list[list[list[Any]]] = []
    threads: dict[Any, list[Any]] = {}
    for event in events:
        if TICK_HEADER in dict(event.message.headers or ()):
            if threads:
                stages.append(list(threads.values()))
                threads = {}
            stages.append([[event]])
            continue
        threads.setdefault(event.message.key, []).append(event)
    if threads:
        stages.append(list(threads.values()))
    return stages


@dataclass
class Pipeline:
    """What the agent does with each record; faust only feeds it."""

    settings: Any
    events: Any  # faust Table: bytes -> bytes
    holds: Any
    ledger: TableLedger
    channels: dict[str, Channel]
    writer: ReplyWriter
    dead_letters: Any  # faust Topic
    deliveries: Any  # faust Topic
    metrics: WorkerMetrics
    handler: EventHandler | None = None
    clock: Clock = time.time
    sweep_every_s: float = 600.0
    _last_sweep: dict[int, float] = field(default_factory=dict)
    #: partition -> the last key a sweep pass has read (None: from the start)
    _sweep_from: dict[int, bytes | None] = field(default_factory=dict)
    sweep_slice: int = 5000
    #: partition -> when its last tick was sent and not yet seen; a tick can be lost to a
    #: rebalance (another worker reads it), so one older than ``retick_s`` is sent again
    _ticking: dict[int, float] = field(default_factory=dict)
    retick_s: float = 2.0
    #: thread key -> partition of the buffers holding events; None: read the table again
    _held: dict[bytes, int] | None = None
    #: False while a rebalance is under way (faust has stopped the flow of records)
    flowing: Callable[[], bool] = lambda: True

    @property
    def window_ms(self) -> int:
        return int(self.settings.reorder_window_ms)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- the agent's two kinds of record -------------------------------------------
    async def on_batch(self, events: Sequence[Any]) -> None:
        """Every record of a batch: partitions and threads concurrently, each in order."""
        await asyncio.gather(*(self._partition(part) for part in by_partition(events)))

    async def _partition(self, events: Sequence[Any]) -> None:
        for stage in by_thread(events):
            if len(stage) == 1:
                await self._in_order(stage[0])
            else:
                await asyncio.gather(*(self._in_order(thread) for thread in stage))

    async def _in_order(self, events: Sequence[Any]) -> None:
        for event in events:
            # faust's tables write to the store and changelog partition of the *current*
            # event; each thread runs in a task of its own, so this is per thread
            _current_event.set(weakref.ref(event))
            await self.on_record(event)

    async def on_record(self, event: Any) -> None:
        headers = dict(event.message.headers or ())
        partition = int(event.message.partition)
        if TICK_HEADER in headers:
            self._ticking.pop(partition, None)
            await self.release_due(partition)
        else:
            replay = REPLAY_HEADER in headers
            await self.on_delivery(event.value, partition, int(event.message.offset), replay)
        await self.maybe_sweep(partition)

    async def on_delivery(
        self, value: bytes, partition: int, offset: int, replay: bool = False
    ) -> None:
        try:
            envelope = Envelope.decode(value)
        except SchemaError as exc:
            log.error(
                "record is not an envelope; dead-lettered",
                partition=partition,
                offset=offset,
                error=str(exc),
            )
            await self._dead_letter(
                {
                    "reason": str(exc),
                    "partition": partition,
                    "offset": offset,
                    "value": value.decode("utf-8", "replace"),
                }
            )
            return
        position = (partition, offset)
        if self.window_ms == 0:
            await self.process(
                [(envelope, position)],
                late=set(),
                replayed={envelope.event_id} if replay else set(),
            )
            return
        key = envelope.thread_key.encode()
        raw = self.holds.get(key)
        buffer = (
            reorder.ThreadBuffer.from_json(json.loads(raw))
            if raw
            else reorder.ThreadBuffer(partition=partition)
        )
        held = reorder.Held(
            (int(envelope.occurred_at.timestamp() * 1000), envelope.event_id),
            self.now_ms(),
            {"envelope": envelope.to_json(), "position": list(position), "replay": replay},
        )
        updated = reorder.hold(buffer, held)
        if updated is buffer:  # the same event is already held: a repeat delivery
            self.metrics.duplicates.labels("duplicate").inc()
            log.info(
                "delivery skipped",
                verdict="duplicate",
                provider=envelope.provider,
                event_id=envelope.event_id,
                thread_key=envelope.thread_key,
                held=True,
            )
            return
        self.holds[key] = json.dumps(updated.to_json()).encode()
        self.held()[key] = partition

    def held(self) -> dict[bytes, int]:
        """Thread key -> partition of every buffer that holds events, kept in memory.

        A ``holds`` entry outlives its events (it keeps the thread's release watermark
        for as long as the dedupe retention), so ticks look only at these keys instead of
        decoding the whole table. Read from the table after each rebalance's recovery.
        """
        if self._held is None:
            self._held = {}
            for key, raw in self.holds.items():
                buffer = reorder.ThreadBuffer.from_json(json.loads(raw))
                if buffer.held:
                    self._held[bytes(key)] = buffer.partition
        return self._held

    def forget_held(self) -> None:
        """The partitions changed: read the held buffers from the table again."""
        self._held = None

    async def release_due(self, partition: int) -> None:
        now = self.now_ms()
        held = self.held()
        for key in [k for k, p in held.items() if p == partition]:
            raw = self.holds.get(key)
            buffer = reorder.ThreadBuffer.from_json(json.loads(raw)) if raw else None
            if buffer is None or not buffer.held:
                held.pop(key, None)
                continue
            out, rest = reorder.release(buffer, now_ms=now, window_ms=self.window_ms)
            if not out.events:
                continue
            batch = [
                (Envelope.from_json(h.item["envelope"]), tuple(h.item["position"]))
                for h in out.events
            ]
            late = {h.item["envelope"]["event_id"] for h in out.events if h.sort_key in out.late}
            replayed = {h.item["envelope"]["event_id"] for h in out.events if h.item.get("replay")}
            await self.process(batch, late=late, replayed=replayed)
            # only now: a crash before this line leaves the buffer to be released again
            self.holds[key] = json.dumps(rest.to_json()).encode()
            if not rest.held:
                held.pop(key, None)

    def due_partitions(self) -> set[int]:
        """Partitions (of this worker) holding a buffer whose window has passed."""
        now = self.now_ms()
        due: set[int] = set()
        for key, partition in list(self.held().items()):
            if partition in due:
                continue
            raw = self.holds.get(key)
            if raw is None:
                continue
            buffer = reorder.ThreadBuffer.from_json(json.loads(raw))
            if reorder.due(buffer, now_ms=now, window_ms=self.window_ms):
                due.add(buffer.partition)
        return due

    async def tick(self) -> None:
        now = self.clock()
        due = self.due_partitions()
        for partition in reorder.ticks_due(due, self._ticking, now=now, retick_s=self.retick_s):
            self._ticking[partition] = now
            await self.deliveries.send(value=b"", partition=partition, headers={TICK_HEADER: b"1"})

    # -- one thread's released events -----------------------------------------------
    async def process(
        self,
        batch: Sequence[tuple[Envelope, tuple[int, int]]],
        *,
        late: set[str],
        replayed: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        now_ms = self.now_ms()
        claimed: list[tuple[Envelope, tuple[int, int]]] = []
        for envelope, position in batch:
            ids = {
                "provider": envelope.provider,
                "event_id": envelope.event_id,
                "thread_key": envelope.thread_key,
            }
            if envelope.event_id in late:
                self.metrics.late.inc()
                log.warning("late event: processed after a later one of its thread", **ids)
            key = envelope.dedupe_key.encode()
            raw = self.events.get(key)
            current = EventEntry.from_json(json.loads(raw)) if raw else None
            decision = dedupe.decide(
                current, position=position, now_ms=now_ms, replay=envelope.event_id in replayed
            )
            if decision.skip:
                self.metrics.duplicates.labels(decision.verdict.value).inc()
                log.info("delivery skipped", verdict=decision.verdict.value, **ids)
                continue
            assert decision.entry is not None
            self.events[key] = json.dumps(decision.entry.to_json()).encode()
            claimed.append((envelope, position))
        if not claimed:
            return
        outcomes = await self.act(claimed, replay=bool(replayed))
        for envelope, position in claimed:
            entry = dedupe.finished(
                outcomes.get(envelope.event_id, True), position=position, now_ms=self.now_ms()
            )
            self.events[envelope.dedupe_key.encode()] = json.dumps(entry.to_json()).encode()

    async def act(
        self, claimed: Sequence[tuple[Envelope, tuple[int, int]]], *, replay: bool = False
    ) -> dict[str, bool]:
        """Reply once per channel to the answerable messages; return event_id -> succeeded."""
        outcomes: dict[str, bool] = {}
        bursts: dict[str, list[Inbound]] = {}
        for envelope, _ in claimed:
            ids = {"provider": envelope.provider, "event_id": envelope.event_id}
            channel = self.channels.get(envelope.provider)
            if channel is None:
                outcomes[envelope.event_id] = await self.handle_event(envelope)
                continue
            try:
                found = await channel.inbound(envelope)
            except SendError as exc:
                log.error("could not read the message from the mail API", error=str(exc), **ids)
                outcomes[envelope.event_id] = False
                continue
            if isinstance(found, Skip):
                self.metrics.skips.labels(found.value).inc()
                log.info(
                    "message skipped", reason=found.value, message_id=envelope.message_id, **ids
                )
                continue
            bursts.setdefault(envelope.provider, []).append(found)
        envelopes = {e.event_id: e for e, _ in claimed}
        for provider, burst in bursts.items():
            channel = self.channels[provider]
            result = await reply_once(
                burst,
                ledger=self.ledger,
                sender=channel.sender,
                writer=self.writer,
                dead_letter=lambda record, reason, burst=burst: self._dead_letter_reply(  # type: ignore[misc]
                    record, reason, [envelopes[m.event_id] for m in burst]
                ),
                now=lambda: datetime.fromtimestamp(self.clock(), tz=UTC),
                policy=SendPolicy(attempts=self.settings.send_attempts),
                key_lifetime=channel.key_lifetime,
                replay=replay,
                on_retry=self.metrics.send_retries.inc,
                may_retry=self.flowing,
                channel=channel.name,
            )
            if result.outcome is Outcome.SENT:
                self.metrics.replies.inc()
            ok = result.outcome is not Outcome.FAILED
            for inbound in burst:
                outcomes[inbound.event_id] = ok
        return outcomes

    async def handle_event(self, envelope: Envelope) -> bool:
        """Hand a non-mail event to ONCEONLY_EVENT_HANDLER with an effect ledger."""
        ids = {"provider": envelope.provider, "event_id": envelope.event_id}
        if self.handler is None:
            self.metrics.skips.labels("no_handler").inc()
            log.info("event recorded; no ONCEONLY_EVENT_HANDLER configured", **ids)
            return True
        effects = Effects(envelope, self.ledger, lambda: datetime.fromtimestamp(self.clock(), UTC))
        try:
            await run_handler(self.handler, envelope, effects)
        except Exception as exc:  # a handler's failure is this event's, not the worker's
            reason = "effect_conflict" if isinstance(exc, EffectConflict) else "handler_failed"
            log.error("event handler failed; dead-lettered", reason=reason, error=repr(exc), **ids)
            await self._dead_letter(
                {"reason": f"{reason}: {exc}", "envelopes": [envelope.to_json()]}
            )
            return False
        return True

    async def _dead_letter_reply(
        self, record: ReplyRecord, reason: str, envelopes: Sequence[Envelope]
    ) -> None:
        await self._dead_letter(
            {
                "reason": reason,
                "key": record.key,
                "attempts": record.attempts,
                "last_error": record.error,
                "record": json.loads(record.encode()),
                "envelopes": [e.to_json() for e in envelopes],
            }
        )

    async def _dead_letter(self, letter: dict[str, Any]) -> None:
        letter["at"] = datetime.fromtimestamp(self.clock(), tz=UTC).isoformat()
        self.metrics.dead_letters.inc()
        fut = await self.dead_letters.send(value=json.dumps(letter).encode())
        await fut

    # -- endpoint health ----------------------------------------------------------------
    async def check_webhook(self) -> None:
        """AgentMail disables a failing endpoint after ~5 days, silently: watch for it."""
        webhook_id = self.settings.agentmail_webhook_id
        agentmail = self.channels.get("agentmail")
        client = getattr(agentmail.sender, "client", None) if agentmail else None
        if not webhook_id or client is None:
            return
        try:
            webhook = await client.webhooks.get(webhook_id)
        except Exception as exc:  # the poll must never take the worker down
            log.warning(
                "could not read the AgentMail webhook", webhook_id=webhook_id, error=repr(exc)
            )
            return
        enabled = bool(getattr(webhook, "enabled", False))
        self.metrics.webhook_enabled.set(1 if enabled else 0)
        if not enabled:
            log.error(
                "AGENTMAIL WEBHOOK IS DISABLED: deliveries have stopped and missed events "
                "will not be redelivered; re-enable it, then run onceonly catch-up",
                webhook_id=webhook_id,
            )

    # -- expiry -----------------------------------------------------------------------
    async def maybe_sweep(self, partition: int) -> None:
        """Sweep this partition's expired dedupe entries, a slice per record.

        A pass starts every ``sweep_every_s`` (the first one a whole interval after a
        start or a rebalance) and reads the partition's own store ``sweep_slice`` entries
        at a time, one slice per record the partition receives, so a store of a million
        entries never blocks the event loop for more than a few milliseconds.
        """
        now = self.clock()
        if partition not in self._sweep_from:
            if now - self._last_sweep.setdefault(partition, now) < self.sweep_every_s:
                return
            self._last_sweep[partition] = now
            self._sweep_from[partition] = None
        after = self._sweep_from.pop(partition)
        last = self.sweep(partition, after=after)
        if last is not None:
            self._sweep_from[partition] = last

    def _own_entries(self, partition: int, after: bytes | None) -> list[tuple[bytes, bytes]]:
        """Up to ``sweep_slice`` entries of this partition's own store, after ``after``."""
        store = self.events.data
        db = store._db_for_partition(partition)
        bookkeeping = getattr(store, "offset_key", None)  # faust keeps its offset in the DB
        out: list[tuple[bytes, bytes]] = []
        for key, raw in db.items(from_key=after):
            if (after is not None and key == after) or key == bookkeeping:
                continue
            out.append((bytes(key), bytes(raw)))
            if len(out) >= self.sweep_slice:
                break
        return out

    def sweep(self, partition: int, after: bytes | None = None) -> bytes | None:
        """Delete expired dedupe entries of one slice of this partition (with tombstones).

        Returns the last key read, to go on from, or None once the partition is done.
        """
        retention_ms = int(self.settings.dedupe_retention.total_seconds() * 1000)
        entries = self._own_entries(partition, after)
        mine = [(key, EventEntry.from_json(json.loads(raw))) for key, raw in entries]
        old = list(dedupe.expired(mine, now_ms=self.now_ms(), retention_ms=retention_ms))
        for key in old:
            del self.events[key]
        if old:
            log.info("dedupe entries expired", partition=partition, count=len(old))
        if len(entries) >= self.sweep_slice:
            return entries[-1][0]
        # the pass is over: threads idle for as long keep only a release watermark
        idle = [
            key
            for key, raw in self.holds.items()
            if reorder.idle(
                reorder.ThreadBuffer.from_json(json.loads(raw)),
                partition=partition,
                now_ms=self.now_ms(),
                retention_ms=retention_ms,
            )
        ]
        for key in idle:
            del self.holds[key]
        return None


def _rocks(settings: Any, scale: float = 1.0) -> dict[str, int]:
    return {
        "block_cache_size": max(1 << 20, int(settings.rocksdb_block_cache_bytes * scale)),
        "write_buffer_size": max(1 << 20, int(settings.rocksdb_write_buffer_bytes * scale)),
        "max_write_buffer_number": 2,
        "max_open_files": 256,
        "target_file_size_base": 8 << 20,
    }


def build_app(
    settings: Any,
    *,
    sender: Any = None,
    writer: ReplyWriter | None = None,
    clock: Clock = time.time,
    tick_interval_s: float | None = None,
) -> tuple[faust.App, Pipeline]:
    """A worker app for these settings. Nothing runs until a faust Worker starts it."""
    brokers = [f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")]
    app = faust.App(
        settings.app_id,
        broker=brokers,
        store="rocksdb://",
        datadir=str(settings.data_dir),
        web_enabled=True,
        web_host=settings.worker_host,
        web_port=settings.worker_port,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        autodiscover=False,
        worker_redirect_stdouts=False,
        consumer_group_instance_id=settings.worker_id,
        broker_session_timeout=10,
        broker_heartbeat_interval=1,
        producer_max_request_size=settings.record_max_bytes,
        producer_acks=-1,
        producer_linger=settings.produce_linger_ms / 1000,
        stream_wait_empty=True,
    )
    app.transport.Consumer = RewindingConsumer  # type: ignore[misc]
    types: dict[str, Any] = {"key_type": bytes, "value_type": bytes}  # bytes: raw codec
    raw: dict[str, Any] = {**types, "key_serializer": "raw", "value_serializer": "raw"}
    deliveries = app.topic(settings.deliveries_topic, partitions=settings.partitions, **raw)
    dead_letters = app.topic(settings.dead_letter_topic, partitions=1, **raw)
    events = app.Table(
        "events", default=None, partitions=settings.partitions, options=_rocks(settings), **types
    )
    holds = app.Table(
        "holds",
        default=None,
        partitions=settings.partitions,
        options=_rocks(settings, 0.25),
        **types,
    )
    replies = app.Table(
        "replies",
        default=None,
        partitions=settings.partitions,
        changelog_topic=app.topic(
            settings.ledger_topic, partitions=settings.partitions, compacting=True, **raw
        ),
        options=_rocks(settings, 0.5),
        **types,
    )
    if sender is None:
        key = settings.agentmail_api_key
        sender = (
            AgentMailSender(
                key.get_secret_value(),
                base_url=settings.agentmail_base_url,
                timeout_s=settings.send_timeout_s,
            )
            if key is not None
            else DryRunOutbox(settings.run_dir / "dry-run-outbox.jsonl")
        )
    pipeline = Pipeline(
        settings=settings,
        events=events,
        holds=holds,
        ledger=TableLedger(replies),
        channels={"agentmail": AgentMailChannel(sender)},
        writer=writer or load_writer(settings.reply_writer),
        dead_letters=dead_letters,
        deliveries=deliveries,
        metrics=WorkerMetrics(watch_webhook=bool(settings.agentmail_webhook_id)),
        handler=(
            load_callable(settings.event_handler, "ONCEONLY_EVENT_HANDLER")
            if settings.event_handler
            else None
        ),
        clock=clock,
        sweep_every_s=settings.dedupe_sweep_s
        or max(1.0, settings.dedupe_retention.total_seconds() / 100),
        retick_s=max(1.0, 2 * settings.reorder_window_ms / 1000),
        flowing=app.flow_control.is_active,
    )
    nylas = nylas_channel(
        settings,
        outbox=sender if isinstance(sender, DryRunOutbox) else None,
        registry=pipeline.metrics.registry,
    )
    if nylas is not None:
        pipeline.channels["nylas"] = nylas

    async def process(stream: Any) -> None:
        within = settings.batch_wait_ms / 1000
        async for events in stream.take_events(settings.batch_max, within=within):
            try:
                await pipeline.on_batch(events)
            except Rebalancing as exc:  # no ack: the partition's next owner resumes it
                log.warning("exiting so the batch is redelivered", reason=str(exc))
                os._exit(70)
            except Exception:  # an escaping exception would make faust ack the batch
                log.exception(
                    "unexpected failure; exiting so the batch is redelivered",
                    first=[(e.message.partition, e.message.offset) for e in events[:1]],
                    records=len(events),
                )
                os._exit(70)

    app.agent(deliveries, name="onceonly.process", concurrency=1)(process)

    async def close_senders(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        for channel in pipeline.channels.values():
            close = getattr(channel.sender, "aclose", None)
            if close is not None:
                await close()

    app.on_before_shutdown.connect(close_senders)

    async def on_rebalance_complete(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        pipeline.forget_held()  # the tables of this worker's partitions are recovered now

    app.on_rebalance_complete.connect(on_rebalance_complete)

    if settings.reorder_window_ms > 0:
        interval = tick_interval_s or max(0.05, settings.reorder_window_ms / 4000)
        app.timer(interval, name="onceonly.tick")(pipeline.tick)

    if settings.agentmail_webhook_id:
        app.task(pipeline.check_webhook)  # once at start-up: timers first wait an interval
        app.timer(settings.webhook_poll_s, name="onceonly.webhook")(pipeline.check_webhook)
    pipeline.metrics.registry.register(
        LagCollector(settings.kafka_bootstrap, settings.app_id, [settings.deliveries_topic])
    )

    async def metrics_page(web: Any, request: Any) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.bytes(
            generate_latest(pipeline.metrics.registry),
            content_type=CONTENT_TYPE_LATEST.split(";")[0],
        )

    app.page("/metrics")(metrics_page)
    return app, pipeline


def run_worker(settings: Any) -> None:
    """``onceonly worker``: one faust worker in the foreground."""
    offset = settings.clock_offset_s
    app, _ = build_app(settings, clock=(lambda: time.time() + offset) if offset else time.time)
    faust.Worker(app, loglevel=settings.log_level.lower()).execute_from_commandline()

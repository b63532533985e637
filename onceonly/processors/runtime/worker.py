"""The faust worker: a thin loop around the router.

One agent (concurrency 1) reads the deliveries topic with manual acknowledgements and
hands each record to :meth:`~onceonly.processors.router.Router.admit`, which only routes it: to its
thread's
reorder buffer or lane (:mod:`onceonly.processors.lanes`). Lanes acknowledge each record once its
work is done, and faust commits each partition up to its oldest record not yet
acknowledged; so no batch waits for its slowest conversation, and a crash never skips an
unfinished record.

Three changelog-backed RocksDB tables, all written with the record's own event current,
so each write lands in the store and changelog partition of the thread it belongs to:

* ``events``: dedupe entries keyed ``provider:event_id``;
* ``holds``: each thread's reorder buffer (:mod:`onceonly.processors.reorder.holds`);
* ``replies``: the reply ledger, whose changelog *is* the compacted ledger topic
  (:class:`onceonly.processors.reply.ledger.TableLedger`).

Held events are released by *ticks*: a timer sends an empty record, marked with the
``onceonly-tick`` header, to each partition that holds a due buffer; the agent meets it
in that partition's order and queues a release on each due thread's lane.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import faust
import structlog
from aiohttp import web
from faust.types import TP

from onceonly.foundation import tracing
from onceonly.foundation.kafka import Admin, Connection, TopicSpec
from onceonly.foundation.settings import Settings
from onceonly.processors.dead_letters import DeadLetters
from onceonly.processors.decisions import Decisions
from onceonly.processors.dedupe.decisions import Retention
from onceonly.processors.dedupe.sweep import Sweeper
from onceonly.processors.exceptions import Rebalancing
from onceonly.processors.fence import Fence
from onceonly.processors.flow.admission import admission_for
from onceonly.processors.health import WebhookHealth
from onceonly.processors.lanes import Lanes
from onceonly.processors.mail.protocol import MailClient, MailProvider
from onceonly.processors.mail.registry import mail_providers
from onceonly.processors.metrics import WorkerMetrics
from onceonly.processors.offsets import OffsetBook
from onceonly.processors.parts import WorkerParts
from onceonly.processors.records import Record
from onceonly.processors.reorder.holds import Holds
from onceonly.processors.reply.late_sends import LateSends
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.reply.retention import LedgerSweeper
from onceonly.processors.router import Router
from onceonly.processors.runtime.app import (
    Topology,
    current_position,
    faust_app,
    record_of,
    topology,
)
from onceonly.processors.runtime.broker_errors import Produced
from onceonly.processors.runtime.consumer import draining_consumer
from onceonly.processors.runtime.ledger_topic import topic_ledger
from onceonly.processors.runtime.lifecycle import drain as drain_parts
from onceonly.processors.runtime.lifecycle import share_model_budget, wire_lifecycle
from onceonly.processors.runtime.progress import Worker
from onceonly.processors.runtime.tables import FaustTable
from onceonly.processors.stalls import StallWatch
from onceonly.processors.writer.contract import ReplyWriter
from onceonly.processors.writer.loading import load_callable, load_writer
from onceonly.processors.writer.runner import Writer, WriterPolicy

log = structlog.get_logger("onceonly.worker")

Clock = Callable[[], float]  # epoch seconds

#: exit code of a worker that must stop without acknowledging what it took
EXIT_REDELIVER = 70
#: how long one ownership check waits for the group coordinator; with no answer by then
#: (the coordinator unreachable or moving) it asks again, writing and sending nothing
FENCE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class WorkerView:
    """What pages mounted from the layers above may read of a running worker."""

    settings: Settings
    webhook: WebhookHealth = field(default_factory=lambda: WebhookHealth(None))


#: pages from the layers above (the operator page, ``onceonly.operations.ops_page``): given the
#: worker's view, the aiohttp routes to serve on the worker's web port
Pages = Callable[[WorkerView], Iterable[web.AbstractRouteDef]]


def _fatal(exc: BaseException) -> None:
    """A failure of the worker itself (the broker gone past every retry): exit, ack nothing."""
    log.error("worker failure; exiting so its records are read again", error=repr(exc))
    os._exit(EXIT_REDELIVER)


async def admit_or_exit(
    router: Any, record: Any, fatal: Callable[[BaseException], None] = _fatal
) -> None:
    """The router dead-letters what one record's routing raises; what escapes it (the
    broker away under a ledger sweep or a dead letter) is the worker's failure. faust's
    agent would be restarted without the rest of its batch, and the offsets committed past
    it: the worker exits instead, and the records are read again. A fence's refusal
    (``Rebalancing``: the partition moved, or the worker is stopping) is no failure: it
    goes on up, as a cancellation does, and the records are read again after the seek, or
    by the partition's next owner."""
    try:
        await router.admit(record)
    except (asyncio.CancelledError, Rebalancing):
        raise
    except Exception as exc:
        fatal(exc)


def writer_policy(settings: Settings) -> WriterPolicy:
    return WriterPolicy(
        concurrency=settings.writer_concurrency,
        timeout_s=settings.writer_timeout_s,
        attempts=settings.writer_attempts,
        backoff_initial_s=settings.writer_backoff_s,
    )


def _lanes(app: faust.App, settings: Settings, metrics: WorkerMetrics, book: OffsetBook) -> Lanes:
    def forget(records: Iterable[Record]) -> None:  # dropped: faust must not wait for them
        unacked = app.consumer.unacked
        for record in records:
            unacked.discard(record.handle.message)

    async def ack(record: Record) -> None:  # finished: its offset may be committed
        event = record.handle
        message = event.message
        book.finish(message.tp, message.offset, message)
        event.ack()
        metrics.pending_records.set(lanes.pending)

    lanes = Lanes(ack=ack, forget=forget, on_fatal=_fatal, max_pending=settings.max_pending)
    return lanes


def _holds(settings: Settings, table: FaustTable) -> Holds:
    """The reorder buffers, a held delivery acknowledged once its hold landed (F40)."""
    window, most = settings.reorder_window_ms, settings.record_max_bytes // 2
    return Holds(table, window, most, table.write_soon)


def _stall_watch(settings: Settings, metrics: WorkerMetrics) -> StallWatch:
    """The check that replaces faust's livelock detector (:mod:`onceonly.processors.stalls`)."""
    return StallWatch(
        settings.stall_warn_s,
        on_round=metrics.stall_checks.inc,
        on_stalled=metrics.stalled_partitions.set,
    )


def _writer(settings: Settings, writer: ReplyWriter | None, metrics: WorkerMetrics) -> Writer:
    """The writer step: the user's writer under the policy, admitted by slot, tenant, rate."""
    return Writer(
        writer or load_writer(settings.reply_writer),
        writer_policy(settings),
        on_call=metrics.writer_call,
        admission=admission_for(settings, metrics),
        on_usage=metrics.writer_usage,
    )


def _router(
    app: faust.App,
    settings: Settings,
    topics: Topology,
    clients: Mapping[str, MailClient] | None,
    writer: ReplyWriter | None,
    clock: Clock,
    book: OffsetBook,
) -> Router:
    metrics = WorkerMetrics(watch_webhook=bool(settings.agentmail_webhook_id))
    retention, handler = Retention.of(settings), settings.event_handler

    events, holds = FaustTable(topics.events), FaustTable(topics.holds)
    fence = _fence(app, metrics)
    replies = FaustTable(topics.replies)
    ledger = topic_ledger(settings, replies, fence.check, clock)
    channels = mail_providers(settings, registry=metrics.registry, clients=clients)
    parts = WorkerParts(
        settings=settings,
        events=events,
        holds=_holds(settings, holds),
        ledger=ledger,
        channels=channels,
        writer=_writer(settings, writer, metrics),
        dead_letters=DeadLetters(
            Produced(topics.dead_letters, "dead-letter"),
            metrics,
            clock,
            settings.record_max_bytes,
            settings.envelope_mac_key,
        ),
        deliveries=topics.deliveries,
        metrics=metrics,
        lanes=_lanes(app, settings, metrics, book),
        sweeper=Sweeper(
            events,
            holds,
            retention=retention,
            clock=clock,
            every_s=settings.dedupe_sweep_s or max(1.0, retention.shortest_ms / 100_000),
        ),
        ledger_sweeper=_ledger_sweeper(replies, ledger, settings, clock, metrics),
        handler=load_callable(handler, "ONCEONLY_EVENT_HANDLER") if handler else None,
        clock=clock,
        flowing=app.flow_control.is_active,
        mac_key=settings.envelope_mac_key,
        decisions=Decisions(topics.decisions, clock),
        fence=fence,
        read_from=lambda partition: book.first(TP(settings.deliveries_topic, partition)),
        late_sends=_late_sends(settings, replies, ledger, channels),
    )
    return Router(parts, retick_s=max(1.0, 2 * settings.reorder_window_ms / 1000))


def _fence(app: faust.App, metrics: WorkerMetrics) -> Fence:
    """The fence: the group coordinator asked, through the consumer, before each send."""

    async def confirm(tp: Any, generation: int) -> bool:
        consumer: Any = app.consumer  # onceonly.processors.runtime.consumer.TrackingConsumer
        return bool(await consumer.confirm_owner(tp, generation, FENCE_TIMEOUT_S))

    return Fence(
        confirm,
        current_position,
        on_fenced=metrics.fenced.inc,
        on_gap=metrics.fence_to_send.observe,
    )


def _late_sends(
    settings: Settings,
    replies: FaustTable,
    ledger: TableLedger,
    channels: Mapping[str, MailProvider],
) -> LateSends:
    """The late-send check; the ledger's take-overs hand it the replies a partition's last
    owner recorded *failed* and did not live (or own the partition long enough) to check."""
    check_s, wall = settings.late_send_check_s, ledger.clock  # the clock of its made_at
    late = LateSends(check_s, time.monotonic, replies.partition_of, wall=wall, store=replies)

    def sender_of(channel: str) -> MailClient | None:
        provider = channels.get(channel)
        return provider.sender if provider is not None else None

    ledger.on_taken = functools.partial(late.taken, sender_of=sender_of)
    return late


def _ledger_sweeper(
    replies: FaustTable,
    ledger: TableLedger,
    settings: Settings,
    clock: Clock,
    metrics: WorkerMetrics,
) -> LedgerSweeper:
    """The sweep of settled ledger records past ONCEONLY_LEDGER_RETENTION, a pass every
    1/1,000 of it (21.6 min at the default 15 days: far inside the rule's hour of slack,
    and a pass over a large store, a slice per delivery, is not started again at once)."""
    horizon = settings.ledger_retention
    return LedgerSweeper(
        replies,
        ledger.remove,
        horizon,
        clock,
        on_removed=metrics.ledger_removed.inc,
        every_s=max(1.0, horizon.total_seconds() / 1000),
    )


def build_app(
    settings: Settings,
    *,
    clients: Mapping[str, MailClient] | None = None,
    writer: ReplyWriter | None = None,
    clock: Clock = time.time,
    tick_interval_s: float | None = None,
    pages: Pages | None = None,
    replication: int | None = None,
) -> tuple[faust.App, Router]:
    """A worker app for these settings. Nothing runs until a faust Worker starts it.

    ``pages`` adds routes to the worker's web port beside ``/metrics``. ``replication``
    (default: ONCEONLY_REPLICATION_FACTOR, else decided from the number of brokers, as for
    onceonly's own topics) applies to the changelogs faust creates. ``clients`` replaces
    mail providers' API clients by name (else each is built from the settings:
    :func:`onceonly.processors.mail.registry.mail_providers`)."""
    if replication is None:
        admin = Admin(Connection.from_settings(settings), log_level=2)
        replication = admin.replication_for(settings.replication_factor)
    app = faust_app(settings, replication)
    parts = topology(app, settings, replication)
    book = OffsetBook()
    router = _router(app, settings, parts, clients, writer, clock, book)
    lanes = router.parts.lanes

    async def drain() -> None:
        await drain_parts(router.parts, settings.drain_grace_s)
        router.forget_state()

    stalls = _stall_watch(settings, router.parts.metrics)
    app.transport.Consumer = draining_consumer(drain, book, stalls)  # type: ignore[misc]

    async def process(stream: Any) -> None:
        within = settings.batch_wait_ms / 1000
        # take_events acknowledges each batch as the next is asked for, whatever its work:
        # commits follow the book instead, where a record is finished by its lane
        async for records in stream.noack().take_events(settings.batch_max, within=within):
            for record in records:
                if not app.flow_control.is_active():
                    # a rebalance began (the lanes may be drained already): the rest of the
                    # batch is neither taken nor started; it is read again after the seek
                    break
                message = record.message
                book.take(message.tp, message.offset, message)
                await admit_or_exit(router, record_of(record))
            router.parts.metrics.pending_records.set(lanes.pending)

    app.agent(parts.deliveries, name="onceonly.process", concurrency=1)(process)
    view = WorkerView(settings, WebhookHealth(settings.agentmail_webhook_id))
    wire_lifecycle(app, router, settings, tick_interval_s, view.webhook)
    share_model_budget(app, router, settings)
    if pages is not None:  # faust's default web driver is aiohttp; its Application serves them
        application: web.Application = app.web.web_app  # type: ignore[attr-defined]
        application.add_routes(list(pages(view)))
    return app, router


def wait_for_broker(settings: Settings, *, log_every_s: float = 30.0) -> None:
    """Block until the broker answers: faust exits at once if it cannot bootstrap, so a
    worker started during a broker outage would only crash-loop under its supervisor.
    Refused credentials raise AuthenticationFailed at once: waiting would not help."""
    admin = Admin(Connection.from_settings(settings), log_level=2)
    next_log = 0.0
    while not admin.ping(2.0, refused_raises=True):
        if time.monotonic() >= next_log:
            log.warning("waiting for the broker", bootstrap=admin.bootstrap)
            next_log = time.monotonic() + log_every_s
        time.sleep(1.0)


def changelog_specs(settings: Settings) -> list[TopicSpec]:
    """The changelogs faust would create for the events and holds tables, created first
    (replicated and checked as onceonly's own topics): on a cluster, faust's assignor
    reads metadata right after creating a topic, from a broker that may not list it yet,
    and would then leave that table's partitions unassigned."""
    return [
        TopicSpec(
            f"{settings.app_id}-{table}-changelog",
            settings.partitions,
            config={"cleanup.policy": "compact"},
            replication=settings.replication_factor,
        )
        for table in ("events", "holds")
    ]


def _prepare_group(settings: Settings) -> None:
    """The changelogs made and the group's coordinator awaited, by an admin client that is
    destroyed with this frame, before the worker runs. The coordinator is asked with an
    offset fetch: the admin's describe_consumer_groups aborted workers in librdkafka
    (rd_kafka_enq_once_del_source_return; Admin.group_coordinator_ready)."""
    admin = Admin(Connection.from_settings(settings), log_level=2)
    admin.ensure_topics(changelog_specs(settings))
    if not admin.await_group_coordinator(settings.app_id):
        log.warning(
            "the consumer group's coordinator did not answer; joining anyway", group=settings.app_id
        )


def run_worker(settings: Settings, pages: Pages | None = None) -> None:
    """``onceonly worker``: one faust worker in the foreground, once the broker answers;
    ``pages`` are served on its web port (the command passes the operator page)."""
    wait_for_broker(settings)
    _prepare_group(settings)
    offset = settings.clock_offset_s
    clock = (lambda: time.time() + offset) if offset else time.time
    app, _ = build_app(settings, clock=clock, pages=pages)
    tracing.configure("onceonly-worker")  # after the writer's import: it may install a provider
    # our logging (onceonly.foundation.logs), not mode's: one format for ingest and the worker
    Worker(app, override_logging=False, quiet=True).execute_from_commandline()

"""The faust App of a worker: its settings, static membership id, credentials, topics and
tables. Building it starts nothing (:mod:`onceonly.processors.runtime.worker` runs it)."""

from __future__ import annotations

import functools
import hashlib
import socket
import ssl
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from faust.streams import _current_event

from onceonly.foundation.kafka import Connection, replicated_config
from onceonly.foundation.settings import Settings
from onceonly.processors.records import Record
from onceonly.processors.runtime.recovery import BulkRestore, table_manager
from onceonly.processors.runtime.stream import BatchingStream
from onceonly.processors.runtime.tables import ContiguousTable, rocks_options


def worker_id(settings: Settings, host: str | None = None) -> str:
    """The worker's static group membership id: ``ONCEONLY_WORKER_ID``, or one made of the
    host name, the data directory and the web port, so a restarted worker (same host, same
    state, same address) takes its partitions back at once instead of waiting out a
    rebalance. The port is part of it: faust's assignor refuses a static member's old
    assignment when the member's web address has changed."""
    if settings.worker_id:
        return settings.worker_id
    where = f"{Path(settings.data_dir).resolve()}\n{settings.worker_port}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:10]
    return f"{host or socket.gethostname()}-{digest}"


#: faust's own web views, all turned off: they can show table contents (email text); the
#: worker serves only /metrics and the pages given to build_app (the operator page)
FAUST_VIEWS_OFF: Mapping[str, Any] = dict.fromkeys(
    (
        "web_router_enabled",
        "web_tables_enabled",
        "web_graph_enabled",
        "web_stats_enabled",
        "web_metrics_enabled",
    ),
    False,
)


def faust_app(settings: Settings, replication: int = 1) -> faust.App:
    """The faust App: RocksDB tables, static membership, ``replication`` copies of the
    topics faust creates (the changelogs, the assignor's), and table recovery that loads a
    partition far behind its changelog in bulk (:mod:`onceonly.processors.runtime.recovery`)."""
    restore = BulkRestore(Connection.from_settings(settings), settings.restore_bulk_min_records)
    return faust.App(
        settings.app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        store="rocksdb://",
        datadir=str(settings.data_dir),
        web_enabled=True,
        **FAUST_VIEWS_OFF,
        web_host=settings.worker_host,
        web_port=settings.worker_port,
        topic_partitions=settings.partitions,
        topic_replication_factor=replication,
        table_standby_replicas=settings.standby_replicas,
        autodiscover=False,
        worker_redirect_stdouts=False,
        consumer_group_instance_id=worker_id(settings),
        broker_session_timeout=10,
        broker_heartbeat_interval=1,
        producer_max_request_size=settings.record_max_bytes,
        producer_acks=-1,
        producer_linger=settings.produce_linger_ms / 1000,
        stream_wait_empty=True,
        stream_buffer_maxsize=settings.stream_buffer_maxsize,
        broker_credentials=faust_credentials(settings),
        TableManager=table_manager(restore),
        # a store's recovery starts after the last changelog record it holds every record
        # up to, never after an own write that landed past another writer's records
        Table=ContiguousTable,
        # batches that wait for a first record, not a loop that polls for one every 5 ms
        Stream=BatchingStream,
    )


def faust_credentials(settings: Settings) -> Any:
    """The worker's aiokafka clients (faust's consumer and producer) connect as every
    other client does (:func:`onceonly.foundation.kafka.client_security`): faust's SASL or SSL
    credentials, with an SSL context that trusts ONCEONLY_KAFKA_SSL_CA_FILE if it is set."""
    protocol = settings.kafka_security_protocol
    context = None
    if protocol.endswith("SSL"):
        ca = settings.kafka_ssl_ca_file
        context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    if protocol.startswith("SASL_"):
        password = settings.kafka_sasl_password
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=password.get_secret_value() if password is not None else None,
            ssl_context=context,
            mechanism=settings.kafka_sasl_mechanism,
        )
    return faust.SSLCredentials(context) if context is not None else None


@dataclass(frozen=True)
class Topology:
    """The worker's topics and tables (raw bytes everywhere)."""

    deliveries: Any
    dead_letters: Any
    decisions: Any
    events: Any
    holds: Any
    replies: Any


def topology(app: faust.App, settings: Settings, replication: int = 1) -> Topology:
    types: dict[str, Any] = {"key_type": bytes, "value_type": bytes}  # bytes: raw codec
    raw: dict[str, Any] = {**types, "key_serializer": "raw", "value_serializer": "raw"}
    partitions = settings.partitions

    def table(name: str, scale: float, **extra: Any) -> Any:
        options = rocks_options(settings, scale)
        return app.Table(
            name,
            default=None,
            partitions=partitions,
            options=options,
            # the changelog: min.insync.replicas=2 when replicated 3 times, as our topics
            extra_topic_configs=replicated_config(replication),
            **types,
            **extra,
        )

    # the replies table's changelog, which the worker never streams: acks=False, as faust
    # makes its own changelogs. A topic acknowledged by default counts as a stream to faust's
    # livelock check, and a changelog's partition, read once at recovery, then looks like a
    # stream that never started ("Stream has not started processing" every 7 s)
    ledger = app.topic(
        settings.ledger_topic, partitions=partitions, compacting=True, acks=False, **raw
    )
    return Topology(
        deliveries=app.topic(settings.deliveries_topic, partitions=partitions, **raw),
        dead_letters=app.topic(settings.dead_letter_topic, partitions=1, **raw),
        decisions=app.topic(settings.decisions_topic, partitions=partitions, **raw),
        events=table("events", 1.0),
        holds=table("holds", 0.25),
        replies=table("replies", 0.5, changelog_topic=ledger),
    )


#: the partition and group generation of the record a task (or a writer's thread, which
#: runs in its task's context) works for; held strongly, unlike faust's current event,
#: so work that outlives its record (a sync writer's thread after a drain) is still fenced
_position: ContextVar[tuple[Any, int] | None] = ContextVar("onceonly_position", default=None)


def set_current(event: Any) -> None:
    """Make ``event`` the record this task works for: faust's tables write to its
    partition, and the fence checks that partition."""
    _current_event.set(weakref.ref(event))
    message = event.message
    generation = message.generation_id  # None: unknown, which no generation confirms
    _position.set((message.tp, -1 if generation is None else int(generation)))


def record_of(event: Any) -> Record:
    """faust's event as the worker's typed :class:`~onceonly.processors.records.Record`."""
    message = event.message
    return Record(
        value=event.value,
        headers=tuple(message.headers or ()),
        partition=int(message.partition),
        offset=int(message.offset),
        handle=event,
        _enter=functools.partial(set_current, event),
    )


def current_position() -> tuple[Any, int] | None:
    """The partition and generation set by :func:`set_current`, or None outside a record's
    work (a tool, a test)."""
    return _position.get()

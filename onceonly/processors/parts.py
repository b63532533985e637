"""The worker's parts: what the router and each conversation reach, built once by the
runtime (:mod:`onceonly.processors.runtime.worker`) as one typed object."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from onceonly.foundation.settings import Settings
from onceonly.processors.dead_letters import DeadLetters
from onceonly.processors.decisions import Decisions
from onceonly.processors.dedupe.sweep import Sweeper
from onceonly.processors.effects.once import EventHandler
from onceonly.processors.fence import Fence
from onceonly.processors.lanes import Lanes
from onceonly.processors.mail.protocol import MailProvider
from onceonly.processors.metrics import WorkerMetrics
from onceonly.processors.records import KeyValues, Topic
from onceonly.processors.reorder.holds import Holds
from onceonly.processors.reply.late_sends import LateSends
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.reply.retention import LedgerSweeper
from onceonly.processors.writer.runner import Writer

Clock = Callable[[], float]  # epoch seconds


@dataclass
class WorkerParts:
    """The worker's tables, topics, writer, mail channels, lanes, metrics and fence."""

    settings: Settings
    events: KeyValues  #: dedupe entries
    holds: Holds
    ledger: TableLedger
    channels: dict[str, MailProvider]
    writer: Writer
    dead_letters: DeadLetters
    deliveries: Topic  #: for ticks and the drafts' timeouts
    metrics: WorkerMetrics
    lanes: Lanes
    sweeper: Sweeper
    #: tombstones settled ledger records past ONCEONLY_LEDGER_RETENTION (None: kept)
    ledger_sweeper: LedgerSweeper | None = None
    handler: EventHandler | None = None
    clock: Clock = time.time
    #: False while a rebalance is under way (the runtime has stopped the flow of records)
    flowing: Callable[[], bool] = lambda: True
    retry_backoff_s: float = 0.5
    #: ONCEONLY_ENVELOPE_SECRET: records without a valid MAC are dead-lettered, never processed
    mac_key: bytes | None = None
    #: the decisions topic: each skip, written off the ack path (none: written nowhere)
    decisions: Decisions = field(default_factory=Decisions)
    fence: Fence | None = None  #: checked before each send (the ledger fences its writes)
    #: a deliveries partition's first offset read since it was given to this worker (its
    #: committed offset then; None: none yet): a claim owned by a record before it is stale
    read_from: Callable[[int], int | None] = lambda partition: None
    #: replies recorded *failed* after sends whose outcomes are unknown, read again later
    #: (ONCEONLY_LATE_SEND_CHECK_S; by default none kept)
    late_sends: LateSends = field(default_factory=lambda: LateSends(0.0, time.monotonic))

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), tz=UTC)

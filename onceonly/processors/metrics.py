"""Prometheus metrics of the worker, on a registry of its own."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from onceonly.foundation.kafka import BrokerUnavailable, Connection, consumer_lag

log = structlog.get_logger("onceonly.worker")


class WorkerMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, watch_webhook: bool = False
    ) -> None:
        self.registry = registry or CollectorRegistry()
        #: the metrics made on this worker's registry
        self._counter = partial(Counter, registry=self.registry)
        self._gauge = partial(Gauge, registry=self.registry)
        self._histogram = partial(Histogram, registry=self.registry)
        self.duplicates = self._counter(
            "onceonly_duplicates_skipped",
            "Deliveries skipped by dedupe, by verdict (duplicate, in_progress, failed).",
            ["verdict"],
        )
        self.late = self._counter(
            "onceonly_late_events", "Events processed after a later one of their thread."
        )
        self.replies = self._counter("onceonly_replies_sent", "Replies confirmed by the mail API.")
        self.skips = self._counter("onceonly_skips", "Events not acted on, by reason.", ["reason"])
        self.ledger_removed = self._counter(
            "onceonly_ledger_records_removed",
            "Settled reply records tombstoned from the ledger past ONCEONLY_LEDGER_RETENTION.",
        )
        self.send_retries = self._counter(
            "onceonly_send_retries", "Send attempts after the first, with the same key."
        )
        # exported only when a webhook is watched, so "not watched" never reads as disabled
        self.webhook_enabled = Gauge(
            "onceonly_webhook_enabled",
            "1 while the AgentMail webhook (ONCEONLY_AGENTMAIL_WEBHOOK_ID) is enabled, else 0.",
            registry=self.registry if watch_webhook else None,
        )
        self.dead_letters = self._counter(
            "onceonly_dead_letters", "Records written to the dead-letter topic."
        )
        self.fenced = self._counter(
            "onceonly_fenced",
            "Writes and sends refused because the record's partition was no longer ours.",
        )
        self.fence_to_send = self._histogram(
            "onceonly_fence_to_send_seconds",
            "From the last ownership check to the start of the send: the window no fence "
            "closes (a pause here still sends; the idempotency key keeps it to one email).",
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 1),
        )
        self._writer_metrics()
        self._flow_metrics()
        self._approval_metrics()
        self._stall_metrics()

    def _stall_metrics(self) -> None:
        """The stalled-partition check's (:mod:`onceonly.processors.stalls`)."""
        self.stalled_partitions = self._gauge(
            "onceonly_stalled_partitions",
            "Deliveries partitions whose records wait with no progress past ONCEONLY_STALL_WARN_S.",
        )
        self.stall_checks = self._counter(
            "onceonly_stall_checks",
            "Rounds of the stalled-partition check (every 7 s while the worker runs).",
        )

    def _writer_metrics(self) -> None:
        """The agent step's: writer calls, their time, what is in flight, what is pending."""
        self.superseded = self._counter(
            "onceonly_replies_superseded",
            "Reply texts not recorded because a newer message of the thread arrived.",
        )
        self.writer_calls = self._counter(
            "onceonly_writer_calls",
            "Reply writer calls, by outcome (written, declined, error, timeout).",
            ["outcome"],
        )
        self.writer_seconds = self._histogram(
            "onceonly_writer_seconds",
            "How long each reply writer call took.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )
        self.writer_in_flight = self._gauge(
            "onceonly_writer_in_flight",
            "Reply writer calls running now (at most ONCEONLY_WRITER_CONCURRENCY).",
        )
        self.pending_records = self._gauge(
            "onceonly_pending_records",
            "Records taken from the deliveries topic and not yet finished.",
        )

    def _flow_metrics(self) -> None:
        """Flow control for the model (:mod:`onceonly.processors.flow.admission`) and what
        replies cost."""
        self.writer_tokens = self._counter(
            "onceonly_writer_tokens",
            "Tokens the reply writer reported, by model and kind (input, output).",
            ["model", "kind"],
        )
        self.model_pauses = self._counter(
            "onceonly_model_pauses",
            "Pauses of every writer call to a model after it answered 429 with Retry-After.",
            ["model"],
        )
        self.model_paused_seconds = self._counter(
            "onceonly_model_paused_seconds",
            "Seconds of those pauses (as Retry-After asked).",
            ["model"],
        )
        self.model_share = self._gauge(
            "onceonly_model_share",
            "This worker's share of ONCEONLY_MODEL_RPM/TPM: its partitions / the topic's.",
        )
        self.writer_admission_wait = self._histogram(
            "onceonly_writer_admission_wait_seconds",
            "How long writer calls waited for a slot, their tenant's turn, the rate or a pause.",
            buckets=(0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300),
        )

    def writer_usage(self, usage: Any) -> None:
        self.writer_tokens.labels(usage.model, "input").inc(usage.input_tokens)
        self.writer_tokens.labels(usage.model, "output").inc(usage.output_tokens)

    def model_paused(self, model: str, seconds: float) -> None:
        self.model_pauses.labels(model).inc()
        self.model_paused_seconds.labels(model).inc(seconds)

    def _approval_metrics(self) -> None:
        """Drafts and the decisions on them (ONCEONLY_APPROVAL)."""
        self.approval_decisions = self._counter(
            "onceonly_approval_decisions",
            "Decisions on drafts, by verdict (approved, edited, rejected, timed_out) or by "
            "what became of one that moved nothing (repeated, refused).",
            ["verdict"],
        )
        # each verdict exported from the start at 0, so a rate shows before the first decision
        for verdict in ("approved", "edited", "rejected", "timed_out", "superseded"):
            self.approval_decisions.labels(verdict)
        for what in ("repeated", "refused"):
            self.approval_decisions.labels(what)
        self.drafts_waiting = self._gauge(
            "onceonly_drafts_waiting",
            "Drafts awaiting a person's decision on this worker's partitions.",
        )
        self.draft_oldest_age = self._gauge(
            "onceonly_draft_oldest_age_seconds",
            "Age of the oldest draft awaiting a decision (0: none), from its ledger record.",
        )
        self.drafts_overdue = self._gauge(
            "onceonly_drafts_overdue", "Drafts waiting past ONCEONLY_APPROVAL_TIMEOUT."
        )

    def drafts(self, waiting: int, oldest_age_s: float, overdue: int) -> None:
        self.drafts_waiting.set(waiting)
        self.draft_oldest_age.set(oldest_age_s)
        self.drafts_overdue.set(overdue)

    def approval_decision(self, answer: str, record: Any) -> None:
        """Count a decision: its verdict if it moved a draft, else ``repeated``/``refused``."""
        if record is not None and record.approval is not None:
            self.approval_decisions.labels(record.approval.verdict.value).inc()
        else:
            self.approval_decisions.labels("repeated" if answer == "already" else answer).inc()

    def writer_call(self, outcome: str, seconds: float) -> None:
        self.writer_calls.labels(outcome).inc()
        self.writer_seconds.observe(seconds)


class LagCollector(Collector):
    """``onceonly_consumer_lag{topic, partition}``, read from the broker at scrape time."""

    def __init__(self, connection: Connection, group: str, topics: Iterable[str]) -> None:
        self.connection = connection
        self.group = group
        self.topics = list(topics)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "onceonly_consumer_lag",
            "Log-end offset minus the worker group's committed offset.",
            labels=["topic", "partition"],
        )
        for topic in self.topics:
            try:
                for row in consumer_lag(self.connection, self.group, topic, timeout_s=2.0):
                    gauge.add_metric([row.topic, str(row.partition)], row.lag)
            except BrokerUnavailable as exc:
                log.warning("consumer lag not available", error=str(exc))
        yield gauge

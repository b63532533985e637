"""Prometheus metrics of the ingest service, on a registry of its own.

A stored delivery is the hot path: prometheus_client takes a lock per series and walks
the buckets on every ``observe``, about 3 µs a delivery under load. So by default a stored
delivery is only tallied in plain Python (one bisect, two additions) and the tallies are
folded into the prometheus series whenever the registry is read (``/metrics``,
``get_sample_value``), by a collector registered ahead of them. What a reader sees is what
``observe`` would have given. ``deferred=False`` observes each delivery at once: for
prometheus_client's multiprocess files, which the other ingest processes read
(``ONCEONLY_INGEST_PROCESSES``). Tallies are kept and read on the event loop's thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric

#: the ack-latency buckets, in seconds (prometheus_client adds +Inf)
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class _Tally:
    """One provider's stored deliveries since the last fold: per bucket, and their sum."""

    __slots__ = ("counts", "series", "total")

    def __init__(self, series: tuple[Any, Any]) -> None:
        #: one count per bucket of ACK_BUCKETS, and the last for +Inf
        self.counts = [0] * (len(ACK_BUCKETS) + 1)
        self.total = 0.0
        self.series = series

    def fold(self) -> None:
        """Add the tally to the prometheus series and start again from zero."""
        stored = sum(self.counts)
        if not stored:
            return
        counts, self.counts = self.counts, [0] * len(self.counts)
        total, self.total = self.total, 0.0
        accepted, latency = self.series
        accepted.inc(stored)
        # prometheus_client has no public way to add to a bucket; its own observe() does
        # this, one value at a time (pinned by tests/unit/ingest/test_metrics.py)
        latency._sum.inc(total)
        for bucket, count in zip(latency._buckets, counts, strict=True):
            if count:
                bucket.inc(count)


class _Folder:
    """A collector with no metrics of its own, first on the registry: folds the tallies in
    before the counter and histogram are read."""

    def __init__(self, tallies: dict[str, _Tally]) -> None:
        self.tallies = tallies

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        for tally in self.tallies.values():
            tally.fold()
        return ()


class IngestMetrics:
    """Deliveries accepted, rejected by reason, and the time to the broker's ack."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        providers: tuple[str, ...] = (),
        *,
        deferred: bool = True,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.deferred = deferred
        #: provider -> its tally; the prometheus series it folds into are looked up once
        self._tallies: dict[str, _Tally] = {}
        self.registry.register(_Folder(self._tallies))
        self.accepted = Counter(
            "onceonly_deliveries_accepted",
            "Deliveries verified and acknowledged by the broker.",
            ["provider"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "onceonly_deliveries_rejected",
            "Deliveries refused, by reason (the failed check).",
            ["provider", "reason"],
            registry=self.registry,
        )
        self.ack_latency = Histogram(
            "onceonly_ack_latency_seconds",
            "From the request's arrival to the broker's acknowledgement.",
            ["provider"],
            buckets=ACK_BUCKETS,
            registry=self.registry,
        )
        # export the configured providers' series from the start (0, not "no data")
        for provider in providers:
            self._tally(provider)

    def _tally(self, provider: str) -> _Tally:
        tally = self._tallies.get(provider)
        if tally is None:
            series = (self.accepted.labels(provider), self.ack_latency.labels(provider))
            tally = self._tallies[provider] = _Tally(series)
        return tally

    def stored(self, provider: str, seconds: float) -> None:
        """One delivery of ``provider`` acknowledged by the broker, ``seconds`` after arrival."""
        tally = self._tallies.get(provider) or self._tally(provider)
        if self.deferred:
            tally.counts[bisect_left(ACK_BUCKETS, seconds)] += 1
            tally.total += seconds
        else:  # straight into the series: no tally to allocate and fold per delivery
            accepted, latency = tally.series
            accepted.inc()
            latency.observe(seconds)

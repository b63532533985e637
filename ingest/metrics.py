"""Prometheus metrics of the ingest service, on a registry of its own."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram


class IngestMetrics:
    """Deliveries accepted, rejected by reason, and the time to the broker's ack."""

    def __init__(
        self, registry: CollectorRegistry | None = None, providers: tuple[str, ...] = ()
    ) -> None:
        self.registry = registry or CollectorRegistry()
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
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        #: provider -> its (accepted, latency) series, looked up once: labels() takes a lock
        self._stored: dict[str, tuple[Any, Any]] = {}
        # export the configured providers' series from the start (0, not "no data")
        for provider in providers:
            self._series(provider)

    def _series(self, provider: str) -> tuple[Any, Any]:
        series = self._stored.get(provider)
        if series is None:
            series = (self.accepted.labels(provider), self.ack_latency.labels(provider))
            self._stored[provider] = series
        return series

    def stored(self, provider: str, seconds: float) -> None:
        """One delivery of ``provider`` acknowledged by the broker, ``seconds`` after arrival."""
        accepted, latency = self._series(provider)
        accepted.inc()
        latency.observe(seconds)

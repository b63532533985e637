"""Ingest's metrics: deliveries tallied in plain Python read as prometheus_client's own."""

from __future__ import annotations

from prometheus_client import generate_latest

from onceonly.ingest.metrics import ACK_BUCKETS, IngestMetrics

#: every bucket, its bounds exactly, between them, below the first and beyond the last
_SECONDS = [0.0, 0.0004, *ACK_BUCKETS, *(b * 1.5 for b in ACK_BUCKETS), 12.0, 3600.0]


def _exposition(metrics: IngestMetrics) -> list[str]:
    """The text of /metrics without the _created lines (they differ by construction time)."""
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def _accepted(metrics: IngestMetrics, provider: str) -> float:
    """The counter read straight from the metric, not through the registry."""
    for family in metrics.accepted.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels == {"provider": provider}:
                return sample.value
    return 0.0


def test_tallied_deliveries_read_as_prometheus_observations() -> None:
    deferred = IngestMetrics(providers=("agentmail",))
    direct = IngestMetrics(providers=("agentmail",))
    for seconds in _SECONDS:
        for provider in ("agentmail", "nylas"):
            deferred.stored(provider, seconds)
            direct.accepted.labels(provider).inc()
            direct.ack_latency.labels(provider).observe(seconds)

    assert _exposition(deferred) == _exposition(direct)


def test_a_read_of_the_registry_sees_every_delivery_stored_before_it() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    for _ in range(3):
        metrics.stored("agentmail", 0.004)

    count = metrics.registry.get_sample_value(
        "onceonly_ack_latency_seconds_bucket", {"provider": "agentmail", "le": "0.005"}
    )

    assert count == 3


def test_reading_twice_counts_each_delivery_once() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    metrics.stored("agentmail", 0.004)
    generate_latest(metrics.registry)
    metrics.stored("agentmail", 0.004)

    total = metrics.registry.get_sample_value(
        "onceonly_deliveries_accepted_total", {"provider": "agentmail"}
    )

    assert total == 2


def test_deferred_deliveries_reach_the_series_only_when_the_registry_is_read() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    metrics.stored("agentmail", 0.004)

    assert _accepted(metrics, "agentmail") == 0


def test_without_deferral_each_delivery_reaches_the_series_at_once() -> None:
    # one of several ingest processes: the others read its multiprocess files, not its registry
    metrics = IngestMetrics(providers=("agentmail",), deferred=False)
    metrics.stored("agentmail", 0.004)

    assert _accepted(metrics, "agentmail") == 1

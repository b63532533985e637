"""Ingest's ack-latency quantile between two scrapes of its /metrics."""

from __future__ import annotations

import math

from prometheus_client import generate_latest

from bench._proc_stack import histogram_buckets, samples
from bench.ingest_latency import METRIC, quantile_bound
from onceonly.ingest.metrics import IngestMetrics


def _scrape(metrics: IngestMetrics) -> dict[float, float]:
    return dict(histogram_buckets(samples(generate_latest(metrics.registry).decode()), METRIC))


def test_the_p99_is_the_bound_of_the_bucket_that_reaches_99_percent() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    before = _scrape(metrics)
    for _ in range(98):
        metrics.stored("agentmail", 0.003)
    metrics.stored("agentmail", 0.03)
    metrics.stored("agentmail", 0.03)
    assert quantile_bound(before, _scrape(metrics), 0.99) == 0.05


def test_deliveries_before_the_first_scrape_do_not_count() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    for _ in range(100):
        metrics.stored("agentmail", 0.03)
    before = _scrape(metrics)
    for _ in range(100):
        metrics.stored("agentmail", 0.003)
    assert quantile_bound(before, _scrape(metrics), 0.99) == 0.005


def test_every_provider_counts() -> None:
    metrics = IngestMetrics(providers=("agentmail", "nylas"))
    before = _scrape(metrics)
    metrics.stored("agentmail", 0.003)
    metrics.stored("nylas", 0.3)
    after = _scrape(metrics)
    assert (after[0.005], after[math.inf]) == (1, 2)
    assert quantile_bound(before, after, 0.99) == 0.5


def test_a_tail_past_the_last_bucket_is_infinite() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    before = _scrape(metrics)
    metrics.stored("agentmail", 20.0)
    assert quantile_bound(before, _scrape(metrics), 0.99) == math.inf


def test_no_delivery_between_the_scrapes_has_no_quantile() -> None:
    metrics = IngestMetrics(providers=("agentmail",))
    before = _scrape(metrics)
    assert math.isnan(quantile_bound(before, _scrape(metrics), 0.99))

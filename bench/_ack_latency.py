"""Ingest's own view of its latency: the ``onceonly_ack_latency_seconds`` histogram on its
``/metrics`` (handler start to broker ack), to split a tail between the handler and before it."""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

METRIC = "onceonly_ack_latency_seconds"

#: upper bound (seconds) -> deliveries at or under it, summed over providers
Buckets = dict[float, float]


def ack_buckets(exposition: str) -> Buckets:
    """The histogram's cumulative bucket counts in a ``/metrics`` text."""
    out: Buckets = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            if sample.name == f"{METRIC}_bucket":
                bound = float(sample.labels["le"])
                out[bound] = out.get(bound, 0.0) + sample.value
    return out


def quantile_bound(before: Buckets, after: Buckets, q: float) -> float:
    """The upper bound, in seconds, of the bucket holding quantile ``q`` of the deliveries
    acknowledged between two scrapes: ``inf`` past the last finite bucket, NaN for none."""
    counts = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return math.nan
    return next(bound for bound, count in counts if count >= q * total)


async def scrape(base: str) -> Buckets:
    """The histogram of the ingest at ``base`` now."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as answer:
        answer.raise_for_status()
        return ack_buckets(await answer.text())

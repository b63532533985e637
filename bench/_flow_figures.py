"""The flow-control benchmark's figures, from timestamps: pure functions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from bench import _load
from testkit.invariants import most_in_window as most_in_window  # the checker's own


def rate(times: Sequence[float]) -> float:
    """Events a second from the first to the last (nan for fewer than two)."""
    if len(times) < 2:
        return math.nan
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0-100) of ``values`` (nan when empty)."""
    return _load.percentile(list(values), q / 100)


def gaps(times: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sorted(times))]


def probes_in_pause(
    refused: Sequence[float], first_answer: float, until: float, settle_s: float = 0.5
) -> list[float]:
    """The 429s after the calls in flight at the first 429 came back (``settle_s`` after
    it) and before the throttle ended: what the pause let through."""
    return [at for at in refused if first_answer + settle_s < at < until]


def mean_of(metrics: dict[str, float], histogram: str) -> float:
    """A Prometheus histogram's mean from its ``_sum`` and ``_count`` (nan with none)."""
    count = metrics.get(f"{histogram}_count", 0.0)
    return metrics.get(f"{histogram}_sum", math.nan) / count if count else math.nan


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"

"""The ingest benchmark's figures as measured: one server's run, and the whole run; the targets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench._load import Sample
from bench._options import IngestOptions
from bench._report import Figure

#: c's CPU per delivery (ingest's process) at most this many times b's (verification alone).
TARGET_CPU_OVER_B = 1.5
#: c's deliveries/s at least this many times d's (the AgentMail article's PostgreSQL design).
TARGET_C_OVER_D = 2.0
#: p99 at half of c's peak, open loop.
TARGET_P99_MS = 20.0


def per_delivery_us(percent: float, rate: float) -> float:
    """CPU microseconds per delivery from a CPU share (% of one core) at ``rate`` per second;
    NaN when either is missing or the rate is not positive."""
    if math.isnan(percent) or math.isnan(rate) or rate <= 0:
        return math.nan
    return percent / 100 / rate * 1e6


@dataclass(slots=True)
class Run:
    """One server's figures. ``cpu``: % of one core of each process during the peak;
    ``parts``: the processes whose CPU is the server's work (itself, and PostgreSQL or
    the broker where it uses them)."""

    key: str
    label: str
    peak: Sample
    cpu: dict[str, float]
    parts: tuple[str, ...] = ("server",)
    half: Sample | None = None
    half_rate: float = 0.0
    half_cpu: dict[str, float] = field(default_factory=dict)

    def figure(self) -> Figure:
        return Figure(
            self.key,
            self.label,
            self.peak.rate,
            self.peak.percentile_ms(0.5),
            self.peak.percentile_ms(0.99),
        )

    def us(self, process: str) -> float:
        """CPU µs per delivery of ``process`` at the peak; NaN if it was not measured."""
        return per_delivery_us(self.cpu.get(process, math.nan), self.peak.rate)

    def total_us(self) -> float:
        """CPU µs per delivery of all the server's processes (:attr:`parts`)."""
        return math.fsum(self.us(part) for part in self.parts)


@dataclass(slots=True)
class Results:
    """What one run of the ingest benchmark measured, and on what."""

    opts: IngestOptions
    partitions: int
    runs: list[Run]
    postgres: str = "not started"  #: the database of (d), for the report

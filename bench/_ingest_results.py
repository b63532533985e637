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
#: The open loops of (c), each at this fraction of its peak; the p99 target is at half,
#: the quarter shows the latency where the server is far from its knee.
OPEN_LOOP_FRACTIONS = (0.25, 0.5)
TARGET_FRACTION = 0.5
_FRACTION_NAMES = {0.25: "a quarter", 0.5: "half"}


def fraction_name(fraction: float) -> str:
    """``half``, ``a quarter``, or the fraction as a percentage."""
    return _FRACTION_NAMES.get(fraction, f"{fraction:.0%}")


def per_delivery_us(percent: float, rate: float) -> float:
    """CPU microseconds per delivery from a CPU share (% of one core) at ``rate`` per second;
    NaN when either is missing or the rate is not positive."""
    if math.isnan(percent) or math.isnan(rate) or rate <= 0:
        return math.nan
    return percent / 100 / rate * 1e6


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """(c) at a fixed rate, ``fraction`` of its peak: the figures and each process's CPU."""

    fraction: float
    rate: float
    sample: Sample
    cpu: dict[str, float]


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
    open_loops: list[OpenLoop] = field(default_factory=list)

    def open_loop(self, fraction: float) -> OpenLoop | None:
        """The open loop at ``fraction`` of the peak, if it was measured."""
        return next((ol for ol in self.open_loops if ol.fraction == fraction), None)

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

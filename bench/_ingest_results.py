"""The ingest benchmark's figures as measured: one server's run, and the whole run; the targets."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench._load import Sample
from bench._options import IngestOptions
from bench._report import Figure

TARGET_C_OVER_B = 0.8


TARGET_P99_MS = 20.0


@dataclass(slots=True)
class Run:
    """One server's figures."""

    key: str
    label: str
    peak: Sample
    cpu: dict[str, float]
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


@dataclass(slots=True)
class Results:
    """What one run of the ingest benchmark measured, and on what."""

    opts: IngestOptions
    partitions: int
    runs: list[Run]
    postgres: str = "not started"  #: the database of (d), for the report

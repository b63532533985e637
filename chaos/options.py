"""The options of a chaos run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Options:
    messages: int
    threads: int
    inboxes: int
    workers: int
    kills: int
    broker_restarts: int
    nodes: int  #: 1: the single embedded broker; 3 or more: a local cluster
    leader_kills: int  #: on a cluster: SIGKILLs of the node leading the most partitions
    duplicates: float
    out_of_order: float
    rate: float
    late_duplicate_delay_s: float
    window_ms: int
    fail_rate: float
    lose_rate: float
    latency_ms: float
    latency_spikes: int
    send_timeout_s: float
    broker_down_s: float
    concurrency: int
    delivery_timeout_s: float
    drain_timeout_s: float
    seed: int
    run_dir: Path | None
    keep: bool
    record: bool

    @property
    def size(self) -> str:
        size = "full" if self.messages >= 10_000 else f"{self.messages}-messages"
        return size if self.nodes == 1 else f"{size}-{self.nodes}-nodes"

    def command(self) -> str:
        cluster = (
            f"--nodes {self.nodes} --leader-kills {self.leader_kills} " if self.nodes > 1 else ""
        )
        return (
            f"python -m chaos.run --messages {self.messages} --threads {self.threads} "
            f"--inboxes {self.inboxes} --workers {self.workers} --kills {self.kills} "
            f"--broker-restarts {self.broker_restarts} {cluster}--rate {self.rate:g} "
            f"--late-duplicate-delay-s {self.late_duplicate_delay_s:g} "
            f"--window-ms {self.window_ms} --seed {self.seed}"
        )

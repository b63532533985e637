"""The options of a chaos run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: --keys: the fake AgentMail API honours Idempotency-Key (replays a key's first send)
KEYS_HONOURED = "honoured"
#: --keys: it ignores the key, so every reply call sends: the run counts what onceonly
#: itself prevents
KEYS_IGNORED = "ignored"
#: --writer: chaos.writers:slow, seconds to a minute and a new text each call
WRITER_SLOW = "slow"
#: --writer: onceonly's default writer, an instant acknowledgement
WRITER_INSTANT = "instant"

# --------------------------------------------------------------------------- options


def span(pair: tuple[float, float]) -> str:
    return f"{pair[0]:g}-{pair[1]:g}"


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
    pauses: int  #: SIGSTOPs of a worker with writer calls in flight, past its session
    pause_s: tuple[float, float]  #: each pause lasts this long (s)
    keys: str  #: KEYS_HONOURED or KEYS_IGNORED
    writer: str  #: WRITER_SLOW or WRITER_INSTANT
    writer_s: tuple[float, float]  #: most writer calls take this long (s)
    writer_long_s: tuple[float, float]  #: the long ones this long (s)
    writer_long_share: float
    writer_concurrency: int  #: ONCEONLY_WRITER_CONCURRENCY of the workers
    lost: float  #: share of the messages whose webhooks are never delivered
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
    #: --approvals: the share of the messages whose replies are drafts a decider approves,
    #: edits or rejects (0: no approval mode)
    approvals: float
    run_dir: Path | None
    keep: bool
    record: bool

    @property
    def keys_ignored(self) -> bool:
        return self.keys == KEYS_IGNORED

    @property
    def size(self) -> str:
        size = "full" if self.messages >= 10_000 else f"{self.messages}-messages"
        if self.nodes > 1:
            size += f"-{self.nodes}-nodes"
        if self.window_ms:
            size += f"-window-{self.window_ms}"
        if self.pauses:
            size += "-pauses"
        if self.keys_ignored:
            size += "-keys-ignored"
        if self.approvals:
            size += f"-approvals-{self.approvals:g}"
        return size

    @property
    def writer_calls_longest_s(self) -> float:
        """The longest a writer call can take (0 with the instant writer)."""
        if self.writer != WRITER_SLOW:
            return 0.0
        return max(self.writer_s[1], self.writer_long_s[1] if self.writer_long_share else 0.0)

    def command(self) -> str:
        cluster = (
            f"--nodes {self.nodes} --leader-kills {self.leader_kills} " if self.nodes > 1 else ""
        )
        writer = (
            f"--writer slow --writer-s {span(self.writer_s)} "
            f"--writer-long-s {span(self.writer_long_s)} "
            f"--writer-long-share {self.writer_long_share:g} "
            if self.writer == WRITER_SLOW
            else f"--writer {self.writer} "
        )
        return (
            f"python -m chaos.run --messages {self.messages} --threads {self.threads} "
            f"--inboxes {self.inboxes} --workers {self.workers} --kills {self.kills} "
            f"--broker-restarts {self.broker_restarts} {cluster}"
            f"--pauses {self.pauses} --pause-s {span(self.pause_s)} --keys {self.keys} "
            f"{writer}--writer-concurrency {self.writer_concurrency} --lost {self.lost:g} "
            f"--rate {self.rate:g} --late-duplicate-delay-s {self.late_duplicate_delay_s:g} "
            f"--window-ms {self.window_ms} --fail-rate {self.fail_rate:g} "
            f"--lose-rate {self.lose_rate:g} --latency-spikes {self.latency_spikes} "
            + (f"--approvals {self.approvals:g} " if self.approvals else "")
            + f"--seed {self.seed}"
        )

"""(6) Cold takeover: a worker holding N dedupe entries is SIGKILLed and an empty worker takes
over; then with a warm standby. Times run from the kill to the first and to every partition
answering; the replay rate is from the new owner's log."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench._proc_records import produce_on, thread_records
from bench._proc_stack import group_rss_mb, kill_hard, wait_progress
from bench._procs import BenchError, ServerProcess, console, cpu_seconds
from onceonly.processors.runtime.progress import JOINED, READY, RECOVERED

#: a takeover of millions of entries may take minutes: the stall allowed
TAKEOVER_STALL_S = 1800.0
_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z) \[\w+\s*\] (.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(slots=True)
class Takeover:
    how: str  #: "cold" (empty data directory) or "standby"
    entries: int  #: dedupe entries the killed worker held (active and standby)
    partitions: int  #: the killed worker's partitions, taken over
    first_s: float  #: kill to the first of them answering a new event
    all_s: float  #: kill to every one of them answering
    joined_s: float = math.nan  #: kill to the new owner's last "joined" before recovery
    recovered_s: float = math.nan  #: kill to its "tables recovered"
    ready_s: float = math.nan  #: kill to its "worker ready" (a started process)
    changelog_records: int = 0  #: in the changelogs of its active partitions
    rss_mb: float = math.nan
    hwm_mb: float = math.nan

    @property
    def replay_per_s(self) -> float:
        seconds = self.recovered_s - self.joined_s
        return self.changelog_records / seconds if seconds > 0 else math.nan


@dataclass
class Worker:
    process: ServerProcess
    port: int
    data: Path
    spawned: float = field(default_factory=time.time)


def marks(
    log_path: Path, since: float, needles: tuple[str, ...] = (JOINED, RECOVERED, READY)
) -> list[tuple[float, str, dict[str, str]]]:
    """(seconds after ``since``, message, fields) of the worker's lines that hold a needle."""
    out: list[tuple[float, str, dict[str, str]]] = []
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None or not any(m in found.group(2) for m in needles):
            continue
        stamp = datetime.fromisoformat(found.group(1)).timestamp() - since
        if stamp >= 0:
            out.append((stamp, found.group(2), dict(_FIELD.findall(found.group(2)))))
    return out


def read_marks(t: Takeover, log_path: Path, since: float) -> None:
    """The new owner's recovery after ``since``: its last "tables recovered" and the last
    "joined" before it."""
    lines = marks(log_path, since)
    recovered = [m for m in lines if m[1].startswith(RECOVERED)]
    if not recovered:
        return
    t.recovered_s, _, fields = recovered[-1]
    t.changelog_records = int(fields.get("changelog_records", "0"))
    joined = [s for s, msg, _ in lines if msg.startswith(JOINED) and s <= t.recovered_s]
    t.joined_s = joined[-1] if joined else math.nan
    t.ready_s = next((s for s, msg, _ in lines if msg.startswith(READY)), math.nan)


def probe(bench: Any, label: str, partitions: list[int]) -> dict[int, str]:
    """Produce one probe per partition (on that partition); partition -> Message-ID."""
    probes = dict(zip(partitions, thread_records(label, partitions), strict=True))
    records = ((p, record) for p, (_, record) in probes.items())
    produce_on(bench.bootstrap, bench.deliveries, records, "the takeover probes")
    return {p: message_id for p, (message_id, _) in probes.items()}


def answered(bench: Any, ids: dict[int, str]) -> dict[int, float]:
    """partition -> when the mail server received its probe's reply (epoch seconds)."""
    received = bench.received()
    return {p: received[m] for p, m in ids.items() if m in received}


def wait_answered(
    bench: Any, ids: dict[int, str], process: ServerProcess, what: str
) -> dict[int, float]:
    wait_progress(
        lambda: len(answered(bench, ids)),
        len(ids),
        what=what,
        process=process,
        every_s=0.2,  # the mail server keeps each reply's own time: polling is only progress
        stall_s=TAKEOVER_STALL_S,
    )
    return answered(bench, ids)


def start_worker(bench: Any, name: str, data: Path, **env: str) -> Worker:
    from devstack.broker import free_port

    port = free_port()
    extra = {"ONCEONLY_DATA_DIR": str(data), "ONCEONLY_WORKER_PORT": str(port), **env}
    process, spawned = bench.spawn_worker(name, **extra)
    return Worker(process, port, data, spawned)


def settle(process: ServerProcess, *, quiet_cpu: float = 0.15, every_s: float = 2.0) -> None:
    """Wait until the process uses less than ``quiet_cpu`` of a core (its standbys caught up)."""
    deadline = time.monotonic() + TAKEOVER_STALL_S
    before = cpu_seconds(process.pid)
    while time.monotonic() < deadline:
        time.sleep(every_s)
        now = cpu_seconds(process.pid)
        if (now - before) / every_s < quiet_cpu:
            return
        before = now
    raise BenchError(f"{process.name} never went quiet: standbys still catching up?")


def take_over(
    bench: Any, victim: ServerProcess, heir: Worker | None, mine: list[int], how: str
) -> tuple[Takeover, Worker]:
    """SIGKILL ``victim``; ``heir`` (or, if None, a new worker on an empty data directory)
    takes over its partitions ``mine``; time the probes answered there."""
    killed = time.time()
    kill_hard(victim)
    if heir is None:
        heir = start_worker(bench, "worker (cold takeover)", bench.work / f"cold-{bench.starts}")
    ids = probe(bench, f"{how}-{bench.starts}", mine)
    times = wait_answered(bench, ids, heir.process, f"(6) {how} takeover")
    t = Takeover(how, 0, len(mine), min(times.values()) - killed, max(times.values()) - killed)
    time.sleep(2)  # the "tables recovered" line is written before the first reply
    read_marks(t, heir.process.log_path, killed)
    t.rss_mb, t.hwm_mb = group_rss_mb(heir.process.pid)
    return t, heir


def owned(bench: Any, worker: Worker, partitions: int, label: str) -> list[int]:
    """The partitions ``worker`` answers now: a probe per partition, and its own log."""
    ids = probe(bench, label, list(range(partitions)))
    wait_answered(bench, ids, worker.process, "(6) finding each worker's partitions")
    time.sleep(0.5)
    text = worker.process.log_path.read_text(encoding="utf-8", errors="replace")
    sent = {line for line in text.splitlines() if "reply sent" in line}
    return [p for p, m in ids.items() if any(f"message_id={m}" in line for line in sent)]


def run_takeovers(bench: Any, entries: int, *, standby: bool = True) -> list[Takeover]:
    """(6) cold, then (``standby``) standby. ``bench.worker`` holds every partition and
    ``entries``."""
    every = list(range(bench.partitions))
    console.print(f"(6) cold takeover: SIGKILL of the worker holding {entries:,} entries …")
    cold, heir = take_over(bench, bench.worker, None, every, "cold")
    cold.entries = entries
    bench.worker, bench.worker_port = heir.process, heir.port
    console.print(describe(cold))
    if not standby:
        return [cold]

    console.print("(6) standby: two workers with ONCEONLY_STANDBY_REPLICAS=1 …")
    heir.process.stop(timeout_s=60)
    standby = {"ONCEONLY_STANDBY_REPLICAS": "1"}
    a = start_worker(bench, "worker (standby pair a)", heir.data, **standby)
    b = start_worker(bench, "worker (standby pair b)", bench.work / "standby-b", **standby)
    bench.worker, bench.worker_port = a.process, a.port
    bench.extra.append(b.process)
    mine = owned(bench, a, bench.partitions, f"owned-{bench.starts}")
    if not mine:
        raise BenchError("(6) the standby pair: the first worker answers no partition")
    settle(b.process)  # its standbys of a's partitions have caught up
    warm, _ = take_over(bench, a.process, b, mine, "standby")
    warm.entries = entries
    bench.worker, bench.worker_port = b.process, b.port
    bench.extra.remove(b.process)
    console.print(describe(warm))
    return [cold, warm]


def describe(t: Takeover) -> str:
    return (
        f"(6) {t.how} takeover of {t.partitions} partitions with {t.entries:,} dedupe entries: "
        f"first answered {t.first_s:.2f} s after the SIGKILL, every partition {t.all_s:.2f} s; "
        f"the new owner joined at {t.joined_s:.2f} s and recovered its tables at "
        f"{t.recovered_s:.2f} s ({t.changelog_records:,} changelog records, "
        f"{t.replay_per_s:,.0f}/s); RSS {t.rss_mb:.0f} MB (peak {t.hwm_mb:.0f} MB)"
    )

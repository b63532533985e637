"""The writer calls of a chaos run, read from the logs ``chaos.writers`` writes in the workers:
which are in flight now, and at the end the writer calls per message."""

from __future__ import annotations

import json
import statistics
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Call:
    """One writer call."""

    call: str
    worker: str
    pid: int
    attempt: int
    keys: tuple[str, ...]  #: the reply keys of the burst's messages
    started: float  #: epoch seconds
    sleep_s: float
    ended: float | None = None
    text: str | None = None

    @property
    def in_flight(self) -> bool:
        return self.ended is None


class WriterLog:
    """Reads the writer logs of a run directory as they grow (whole lines only); refresh may
    run in several threads at once (``asyncio.to_thread``), one at a time."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.calls: dict[str, Call] = {}
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        self.bad_lines = 0

    def refresh(self) -> None:
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("writer-*.jsonl")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as source:
                source.seek(offset)
                chunk = source.read()
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[path] = offset + end + 1
            for raw in chunk[: end + 1].splitlines():
                self._take(raw)

    def _take(self, raw: bytes) -> None:
        try:
            line: dict[str, Any] = json.loads(raw)
            if line["event"] == "start":
                self.calls[line["call"]] = Call(
                    call=str(line["call"]),
                    worker=str(line["worker"]),
                    pid=int(line["pid"]),
                    attempt=int(line.get("attempt", 1)),
                    keys=tuple(line["keys"]),
                    started=float(line["t"]),
                    sleep_s=float(line.get("sleep_s", 0.0)),
                )
            elif line["event"] == "end" and line["call"] in self.calls:
                call = self.calls[line["call"]]
                call.ended = float(line["t"])
                call.text = line.get("text")
        except (ValueError, KeyError, TypeError):
            self.bad_lines += 1

    def snapshot(self) -> list[Call]:
        """Every call so far (a copy: a refresh may be running in another thread)."""
        with self._lock:
            return list(self.calls.values())

    def in_flight(self, pids: Iterable[int | None]) -> list[Call]:
        """The calls still running in these processes (a dead process's calls never end)."""
        live = {pid for pid in pids if pid is not None}
        return [c for c in self.snapshot() if c.in_flight and c.pid in live]

    def for_key(self, key: str) -> list[Call]:
        return sorted((c for c in self.snapshot() if key in c.keys), key=lambda c: c.started)

    def by_text(self) -> dict[str, Call]:
        return {c.text: c for c in self.snapshot() if c.text is not None}

    def figures(self, keys: Iterable[str]) -> WriterFigures:
        return WriterFigures.measure(self.snapshot(), list(keys))


@dataclass(frozen=True)
class WriterFigures:
    """Writer (model) calls per message: how often each message was put to the writer."""

    calls: int
    messages: int
    per_message: Mapping[str, int] = field(default_factory=dict)
    #: messages put to the writer by more than one process (a takeover asked again)
    by_several_processes: int = 0
    retries: int = 0  #: calls with attempt > 1 (the worker retried a failed call)
    cancelled: int = 0  #: calls that ended without a text (dropped, timed out)
    unfinished: int = 0  #: calls with no end at all (their process died or was stopped)
    longest_s: float = 0.0
    mean_s: float = 0.0

    @classmethod
    def measure(cls, calls: list[Call], keys: list[str]) -> WriterFigures:
        wanted = set(keys)
        per: Counter[str] = Counter({k: 0 for k in keys})
        pids: defaultdict[str, set[int]] = defaultdict(set)
        for call in calls:
            for key in set(call.keys) & wanted:
                per[key] += 1
                pids[key].add(call.pid)
        lengths = [c.ended - c.started for c in calls if c.ended is not None]
        return cls(
            calls=len(calls),
            messages=len(keys),
            per_message=dict(per),
            by_several_processes=sum(1 for p in pids.values() if len(p) > 1),
            retries=sum(1 for c in calls if c.attempt > 1),
            cancelled=sum(1 for c in calls if c.ended is not None and c.text is None),
            unfinished=sum(1 for c in calls if c.ended is None),
            longest_s=max(lengths, default=0.0),
            mean_s=statistics.fmean(lengths) if lengths else 0.0,
        )

    @property
    def mean(self) -> float:
        return sum(self.per_message.values()) / self.messages if self.messages else 0.0

    @property
    def max(self) -> int:
        return max(self.per_message.values(), default=0)

    @property
    def asked_again(self) -> int:
        """Messages put to the writer more than once (a retry, a rewrite, a takeover)."""
        return sum(1 for n in self.per_message.values() if n > 1)

    @property
    def never_asked(self) -> int:
        return sum(1 for n in self.per_message.values() if n == 0)

    def rows(self) -> list[tuple[str, str]]:
        if not self.calls:
            return [("writer calls", "none logged (an instant writer, or no log)")]
        return [
            (
                "writer calls per message",
                f"mean {self.mean:.2f}, max {self.max} ({self.calls:,} calls for "
                f"{self.messages:,} messages; a call counts for every message of its burst)",
            ),
            (
                "messages asked again",
                f"{self.asked_again:,} put to the writer more than once, "
                f"{self.by_several_processes:,} of them by more than one worker process; "
                f"{self.never_asked:,} never put to it (covered before their turn)",
            ),
            (
                "writer call lengths",
                f"mean {self.mean_s:.1f} s, longest {self.longest_s:.1f} s; {self.retries:,} "
                f"retries, {self.cancelled:,} cancelled, {self.unfinished:,} never ended",
            ),
        ]

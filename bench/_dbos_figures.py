"""The DBOS comparison's figures, from what the harness recorded to the report: pure functions."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bench._load import per_second, percentile
from bench._once import PerMessage
from bench._report import fmt, met


@dataclass(frozen=True, slots=True)
class Call:
    """One line of the calls file: which process started (or finished) which call."""

    pid: int
    kind: str  #: "start" or "done"
    message_id: str


def parse_calls(text: str) -> list[Call]:
    """The calls file's lines; a line cut short by a kill (no newline, or too few fields)
    is left out."""
    out: list[Call] = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        pid, _, rest = line.rstrip("\n").partition(" ")
        kind, _, message_id = rest.partition(" ")
        if pid.isdigit() and kind in ("start", "done") and message_id:
            out.append(Call(int(pid), kind, message_id))
    return out


def starts(calls: Iterable[Call]) -> Counter[str]:
    """Model calls started per message."""
    return Counter(c.message_id for c in calls if c.kind == "start")


def in_flight(calls: Sequence[Call], pid: int) -> int:
    """Calls the process ``pid`` started and never finished (cut short by its kill)."""
    begun = Counter(c.message_id for c in calls if c.pid == pid and c.kind == "start")
    ended = Counter(c.message_id for c in calls if c.pid == pid and c.kind == "done")
    return sum((begun - ended).values())


@dataclass(slots=True)
class SystemRun:
    """One system's figures: the steady run, then the run with a SIGKILL in it."""

    label: str
    #: steady run: message id -> when the broker acknowledged its record (epoch s)
    produced: dict[str, float] = field(default_factory=dict)
    #: message id -> when the mail server received its reply (epoch s)
    received: dict[str, float] = field(default_factory=dict)
    #: CPU seconds per process over the steady run (every process of the system)
    cpu_s: dict[str, float] = field(default_factory=dict)
    memory_mb: dict[str, float] = field(default_factory=dict)  #: PSS per process tree
    #: the kill run
    kill_messages: list[str] = field(default_factory=list)
    emails: PerMessage = field(default_factory=lambda: PerMessage({}))
    sends: PerMessage = field(default_factory=lambda: PerMessage({}))
    calls: PerMessage = field(default_factory=lambda: PerMessage({}))
    in_flight_at_kill: int = 0
    first_reply_after_restart_s: float = math.nan
    unanswered_after_kill: int = 0
    other_cpu: float = 0.0  #: % of a core the rest of the machine used over the steady run
    notes: list[str] = field(default_factory=list)

    @property
    def repeated_after_return(self) -> int:
        """Model calls made again for a message whose earlier call had returned: the kill
        run's calls beyond one per message and beyond those cut short by the kill."""
        extra = sum(self.calls.counts.values()) - len(self.calls.counts) + self.calls.none
        return extra - self.in_flight_at_kill

    @property
    def latencies(self) -> list[float]:
        return [self.received[m] - t for m, t in self.produced.items() if m in self.received]

    def p(self, q: float) -> float:
        return percentile(self.latencies, q)

    @property
    def replies(self) -> int:
        return sum(1 for m in self.produced if m in self.received)

    @property
    def replies_per_s(self) -> float:
        """The steady run's replies, first to last."""
        return per_second(self.received[m] for m in self.produced if m in self.received)

    def cpu_ms_per_reply(self, name: str | None = None) -> float:
        """ms of CPU per steady reply of one process, or of all of them (``None``)."""
        if not self.replies:
            return math.nan
        seconds = self.cpu_s.get(name, math.nan) if name else sum(self.cpu_s.values())
        return 1000 * seconds / self.replies


def _cpu(run: SystemRun) -> str:
    parts = [f"{name} {run.cpu_ms_per_reply(name):.2f}" for name in run.cpu_s]
    return f"{fmt(run.cpu_ms_per_reply(), '.2f')} ({', '.join(parts)})"


def _mem(run: SystemRun) -> str:
    total = sum(run.memory_mb.values()) if run.memory_mb else math.nan
    parts = ", ".join(f"{name} {mb:.0f}" for name, mb in run.memory_mb.items())
    return f"{fmt(total, '.0f')} ({parts})"


def verdicts(a: SystemRun, b: SystemRun) -> dict[str, str]:
    """The issue's targets for onceonly (``a``) against the DBOS app (``b``)."""

    return {
        "replies/s": met(a.replies_per_s >= b.replies_per_s),
        "p99": met(a.p(0.99) <= b.p(0.99)),
        "emails": met(a.emails.passed),
        "calls": met(a.calls.mean < b.calls.mean),
    }


def rows(a: SystemRun, b: SystemRun) -> list[tuple[str, str, str, str]]:
    """(figure, onceonly, DBOS, target for onceonly) rows."""
    v = verdicts(a, b)
    figures: list[tuple[str, Callable[[SystemRun], str], str]] = [
        ("replies (steady run)", lambda x: f"{x.replies:,}", ""),
        ("replies/s", lambda x: fmt(x.replies_per_s, ".1f"), f">= DBOS's: {v['replies/s']}"),
        ("p50 record → email, s", lambda x: fmt(x.p(0.5), ".2f"), ""),
        ("p99 record → email, s", lambda x: fmt(x.p(0.99), ".2f"), f"<= DBOS's: {v['p99']}"),
        ("CPU per reply, ms (by process)", _cpu, ""),
        ("memory, MB PSS (by process)", _mem, ""),
        ("model calls in flight at the SIGKILL", lambda x: str(x.in_flight_at_kill), ""),
        ("emails per message (both runs)", lambda x: x.emails.describe(), f"1: {v['emails']}"),
        ("send requests per message (both runs)", lambda x: x.sends.describe(), ""),
        (
            "model calls per message (kill run)",
            lambda x: x.calls.describe(),
            f"< DBOS's: {v['calls']}",
        ),
        (
            "of which repeats of a call that had returned",
            lambda x: str(x.repeated_after_return),
            "",
        ),
        (
            "first reply after the restart, s",
            lambda x: fmt(x.first_reply_after_restart_s, ".1f"),
            "",
        ),
        ("unanswered after the kill run", lambda x: str(x.unanswered_after_kill), "0"),
    ]
    return [(name, get(a), get(b), target) for name, get, target in figures]


def headers(a: SystemRun, b: SystemRun) -> tuple[str, ...]:
    return ("figure", a.label, b.label, "target for onceonly")

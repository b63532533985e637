"""What a chaos run measures besides its counts: how long ingest refused deliveries, and
the longest time no email went out while messages kept arriving."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Answer:
    """One POST's answer as the load generator saw it."""

    delivery: int  #: which delivery (each copy of a concurrent duplicate is one of its own)
    at_s: float  #: when the answer came, s since the run started
    accepted: bool  #: a 2xx; anything else (a 503, a connection error) is a refusal


@dataclass(frozen=True, slots=True)
class Span:
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def describe(self) -> str:
        return f"{self.length_s:.1f} s, from {self.start_s:.1f} s to {self.end_s:.1f} s"


def _longest(spans: Iterable[Span]) -> Span | None:
    return max(spans, key=lambda s: s.length_s, default=None)


def refusal_windows(answers: Iterable[Answer]) -> list[Span]:
    """Ingest-wide 503 windows: each from a refusal answered while no window is open to
    the next 2xx answered to any POST (a window still open at the last answer ends there).
    While one broker of a cluster is down, the partitions it led refuse and the others
    accept, so a window here is a time when *nothing* was accepted."""
    ordered = sorted(answers, key=lambda a: a.at_s)
    windows: list[Span] = []
    opened: float | None = None
    for answer in ordered:
        if not answer.accepted and opened is None:
            opened = answer.at_s
        elif answer.accepted and opened is not None:
            windows.append(Span(opened, answer.at_s))
            opened = None
    if opened is not None:
        windows.append(Span(opened, ordered[-1].at_s))
    return windows


def refused_deliveries(answers: Iterable[Answer]) -> dict[int, Span]:
    """Per delivery that was refused at least once: from its first refusal to its 2xx
    (or to its last answer, if it never got one)."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for answer in sorted(answers, key=lambda a: a.at_s):
        if not answer.accepted:
            first.setdefault(answer.delivery, answer.at_s)
        if answer.delivery in first:
            last[answer.delivery] = answer.at_s
    return {d: Span(first[d], last[d]) for d in first}


def longest_gap(times: Iterable[float], start_s: float, end_s: float) -> Span | None:
    """The longest interval between consecutive times within [start_s, end_s] (None with
    fewer than two)."""
    inside = sorted(t for t in times if start_s <= t <= end_s)
    return _longest(Span(a, b) for a, b in itertools.pairwise(inside))


@dataclass(frozen=True)
class Figures:
    """The longest 503 window, the longest refused delivery, the longest gap in replies."""

    window: Span | None
    delivery: Span | None
    gap: Span | None
    load: Span  #: the load phase, s since the run started
    load_emails: int  #: emails sent during the load phase

    @classmethod
    def measure(cls, answers: list[Answer], sent_s: list[float], load: Span) -> Figures:
        return cls(
            window=_longest(refusal_windows(answers)),
            delivery=_longest(refused_deliveries(answers).values()),
            gap=longest_gap(sent_s, load.start_s, load.end_s),
            load=load,
            load_emails=sum(1 for t in sent_s if load.start_s <= t <= load.end_s),
        )

    def rows(self) -> list[tuple[str, str]]:
        none = "none: no POST was refused"
        return [
            (
                "longest 503 window",
                (self.window.describe() if self.window else none)
                + " (ingest-wide: from a 503 to the next 204 of any POST)",
            ),
            (
                "longest refused delivery",
                (self.delivery.describe() if self.delivery else none)
                + " (one delivery: its first 503 to its 204)",
            ),
            (
                "longest gap in replies",
                (self.gap.describe() if self.gap else "-")
                + f" (between consecutive emails of the load phase, {self.load.describe()}, "
                f"{self.load_emails:,} emails)",
            ),
        ]

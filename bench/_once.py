"""Every message answered once, nothing doubled: judged by :func:`testkit.invariants.check`,
the one checker of "once" that the chaos suite and the integration tests use too, from a
mail server's emails per replied-to message."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from testkit.invariants import Email, Message, Observed, Verdict, check

INBOX = "bench"  #: the benchmarks' message ids are distinct across their inboxes


def verdict(expected: Iterable[str], emails: Mapping[str, int]) -> Verdict:
    """``expected`` message ids against ``emails`` (message id -> emails it got; ids not
    expected are left out), every message expected settled."""
    want = set(expected)
    return check(
        Observed(
            messages=tuple(Message(INBOX, m) for m in sorted(want)),
            emails=tuple(Email(INBOX, m) for m, n in emails.items() if m in want for _ in range(n)),
            ledger={},
        )
    )


def doubled(judged: Verdict) -> int:
    """Messages answered by more than one email."""
    return len(judged.of("never_doubled"))


@dataclass(frozen=True, slots=True)
class PerMessage:
    """How many times something happened per message, over a set of messages."""

    counts: dict[str, int]

    @classmethod
    def of(cls, messages: Iterable[str], seen: Mapping[str, int]) -> PerMessage:
        return cls({m: seen.get(m, 0) for m in messages})

    @classmethod
    def mailed(
        cls, messages: Iterable[str], counts: Mapping[str, Sequence[int]], *, sends: bool = False
    ) -> PerMessage:
        """Emails (``sends``: reply requests, replays of a key included) per message, from
        the instant mail server's ``/_control/counts``: message -> [emails, requests]."""
        return cls.of(messages, {m: pair[1 if sends else 0] for m, pair in counts.items()})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def mean(self) -> float:
        return self.total / len(self.counts) if self.counts else math.nan

    @property
    def most(self) -> int:
        return max(self.counts.values(), default=0)

    @property
    def none(self) -> int:
        """Messages where it never happened."""
        return sum(1 for n in self.counts.values() if n == 0)

    @property
    def once(self) -> int:
        return sum(1 for n in self.counts.values() if n == 1)

    @property
    def more_than_once(self) -> int:
        return sum(1 for n in self.counts.values() if n > 1)

    @property
    def passed(self) -> bool:
        """Every message answered once, nothing doubled (of emails, by :func:`verdict`)."""
        return verdict(self.counts, self.counts).passed

    def describe(self) -> str:
        """``mean (max M; K twice or more, Z never)``."""
        if not self.counts:
            return "n/a"
        return (
            f"{self.mean:.3f} (max {self.most}; {self.more_than_once} more than once, "
            f"{self.none} never)"
        )

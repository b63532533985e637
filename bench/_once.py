"""Every message answered once, nothing doubled: judged by :func:`testkit.invariants.check`,
the one checker of "once" that the chaos suite and the integration tests use too, from a
mail server's emails per replied-to message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def answered_once(judged: Verdict) -> int:
    """Messages answered by exactly one email."""
    return judged.count("answered") - doubled(judged)

"""bench._once: the benchmarks' "every message answered once, nothing doubled", judged by
testkit.invariants.check from a mail server's emails per message."""

from __future__ import annotations

from bench import _once


def test_a_message_answered_twice_is_doubled_and_not_answered_once() -> None:
    judged = _once.verdict(["<a>", "<b>", "<c>"], {"<a>": 1, "<b>": 2, "<c>": 1})

    assert not judged.passed
    assert _once.doubled(judged) == 1
    assert judged.count("missing") == 0


def test_an_unanswered_message_is_missing_and_emails_of_others_are_left_out() -> None:
    judged = _once.verdict(["<a>", "<b>"], {"<a>": 1, "<b>": 0, "<stray>": 3})

    assert judged.count("missing") == 1
    assert _once.doubled(judged) == 0
    assert [v.invariant for v in judged.violations] == ["answered_once"]


def test_every_message_answered_once_passes() -> None:
    judged = _once.verdict(["<a>", "<b>"], {"<a>": 1, "<b>": 1})

    assert judged.passed
    assert _once.doubled(judged) == 0

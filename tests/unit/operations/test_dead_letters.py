"""Dead letters and their outcomes: a retried letter is no longer open."""

from __future__ import annotations

from onceonly.operations.replay import (
    DeadLetter,
    Plan,
    letters_with_outcomes,
    missing_secret,
    settle,
)
from onceonly.schemas.dead_letter import Resend
from tests.unit.schemas.test_dead_letter import ENVELOPE


def test_a_retried_dead_letter_is_no_longer_open() -> None:
    records = [
        (0, {"reason": "writer_failed", "envelopes": []}),
        (1, {"reason": "send_failed", "envelopes": []}),
        (2, {"kind": "retried", "letters": [0], "at": "2026-12-01T09:00:00+00:00"}),
    ]

    letters = letters_with_outcomes(records)

    assert [(x.offset, x.open) for x in letters] == [(0, False), (1, True)]
    assert letters[0].retried_at == "2026-12-01T09:00:00+00:00"


def test_a_note_that_names_no_ids_closes_nothing() -> None:
    records = [
        (0, {"reason": "send_failed", "envelopes": []}),
        (1, {"kind": "retried", "letters": ["x", None], "at": "t"}),
        (2, {"kind": "retried", "letters": "all", "at": "t"}),
    ]

    assert [x.open for x in letters_with_outcomes(records)] == [True]


def _dl(at: int, **body: object) -> DeadLetter:
    return DeadLetter(at, {"check": "send_failed", **body})


RESEND = Resend(ENVELOPE, None)


def test_a_letter_is_closed_only_when_every_event_was_acknowledged() -> None:
    plans: list[tuple[DeadLetter, Plan]] = [
        (_dl(1), [RESEND]),
        (_dl(2), [RESEND, RESEND]),
        (_dl(3), [RESEND]),
        (_dl(4), "it holds no envelope: ... onceonly dead-letters readmit <id>"),
    ]
    refused = {3: ["the broker refused event evt_1: MSG_SIZE_TOO_LARGE"]}

    report = settle(plans, {1: 1, 2: 1, 3: 0}, refused)

    assert report.sent == (1,) and report.events == 1
    assert [x for x, _ in report.failed] == [2, 3]
    assert "1 event(s) not acknowledged" in report.failed[0][1]
    assert "1 of its 2 event(s) reached the broker" in report.failed[0][1]
    assert "MSG_SIZE_TOO_LARGE" in report.failed[1][1] and "not sent" in report.failed[1][1]
    assert report.held == ((4, "it holds no envelope: ... onceonly dead-letters readmit 4"),)
    assert [x for x, _ in report.left_open] == [4, 2, 3]


def test_without_the_secret_a_retry_of_letters_that_carry_macs_is_refused() -> None:
    signed = _dl(5, macs=["ab"], envelopes=[{}])
    unsigned = _dl(6, envelopes=[{}])

    refusal = missing_secret([signed, unsigned], [signed], None)

    assert refusal is not None and "ONCEONLY_ENVELOPE_SECRET" in refusal
    assert "dead letter 5" in refusal and "bad_mac" in refusal
    assert missing_secret([signed], [signed], b"key") is None
    assert missing_secret([unsigned], [unsigned], None) is None


def test_a_newest_bad_mac_letter_says_the_worker_checks_macs() -> None:
    old = _dl(1, envelopes=[{}])
    newest = _dl(9, check="bad_mac", partition=0, offset=4)

    refusal = missing_secret([old, newest], [old], None)

    assert refusal is not None and "dead letter 9" in refusal

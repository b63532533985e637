"""Dead letters and their outcomes: a retried letter is no longer open."""

from __future__ import annotations

from operations.replay import letters_with_outcomes


def test_a_retried_dead_letter_is_no_longer_open() -> None:
    records = [
        (0, {"reason": "writer_failed", "envelopes": []}),
        (1, {"reason": "send_failed", "envelopes": []}),
        (2, {"kind": "retried", "letters": [0], "at": "2026-12-01T09:00:00+00:00"}),
    ]

    letters = letters_with_outcomes(records)

    assert [(x.offset, x.open) for x in letters] == [(0, False), (1, True)]
    assert letters[0].retried_at == "2026-12-01T09:00:00+00:00"

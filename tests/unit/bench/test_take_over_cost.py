"""The take-over benchmark's ledger: each reply a pending and a sent record, and the late
pending records it plants are the late last words the take-over finds."""

from __future__ import annotations

from bench.take_over_cost import ledger_rows
from onceonly.processors.reply.arbitration import late_last_words


def test_the_planted_late_records_are_the_ones_found() -> None:
    rows = ledger_rows(10, text_chars=5, late_every=3)

    found = late_last_words(rows)

    assert (len(rows), [key for key, _ in found]) == (
        24,
        [f"reply-{i:064x}" for i in (0, 3, 6, 9)],
    )

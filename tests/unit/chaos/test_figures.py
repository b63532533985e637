"""The figures of a chaos run: the longest 503 window, the longest refused delivery, the
longest gap in replies (chaos/figures.py)."""

from __future__ import annotations

import pytest

from chaos.figures import (
    Answer,
    Figures,
    Span,
    longest_gap,
    refusal_windows,
    refused_deliveries,
)

OK, NO = True, False


def answers(*rows: tuple[int, float, bool]) -> list[Answer]:
    return [Answer(d, at, ok) for d, at, ok in rows]


def test_a_window_runs_from_the_first_refusal_to_the_next_acceptance_of_any_post() -> None:
    got = refusal_windows(
        answers((0, 1.0, OK), (1, 2.0, NO), (2, 3.0, NO), (1, 5.5, NO), (3, 6.0, OK), (2, 7.0, OK))
    )

    assert got == [Span(2.0, 6.0)]


def test_answers_are_taken_in_time_order_whatever_order_they_were_recorded_in() -> None:
    got = refusal_windows(answers((3, 6.0, OK), (1, 2.0, NO), (0, 1.0, OK), (2, 9.0, NO)))

    assert got == [Span(2.0, 6.0), Span(9.0, 9.0)]


def test_acceptances_between_refusals_close_the_window() -> None:
    """On a cluster one node's partitions refuse while the others accept: no long window."""
    got = refusal_windows(
        answers((1, 1.0, NO), (2, 1.5, OK), (3, 2.0, NO), (4, 2.5, OK), (1, 4.0, OK))
    )

    assert got == [Span(1.0, 1.5), Span(2.0, 2.5)]


def test_a_window_still_open_at_the_end_ends_at_the_last_answer() -> None:
    assert refusal_windows(answers((0, 1.0, OK), (1, 2.0, NO), (1, 8.0, NO))) == [Span(2.0, 8.0)]
    assert refusal_windows([]) == []
    assert refusal_windows(answers((0, 1.0, OK))) == []


def test_a_refused_delivery_runs_from_its_first_refusal_to_its_acceptance() -> None:
    got = refused_deliveries(
        answers((1, 2.0, NO), (2, 2.5, OK), (1, 4.0, NO), (3, 4.5, NO), (1, 9.0, OK), (3, 5.0, NO))
    )

    assert got == {1: Span(2.0, 9.0), 3: Span(4.5, 5.0)}
    assert got[1].length_s == 7.0


def test_the_gap_is_the_longest_between_consecutive_emails_inside_the_load() -> None:
    sent = [0.5, 3.0, 1.0, 2.0, 9.0, 2.5, 20.0]

    assert longest_gap(sent, 1.0, 10.0) == Span(3.0, 9.0)
    assert longest_gap(sent, 1.0, 8.0) == Span(1.0, 2.0)  # 2.0-2.5-3.0 shorter; 9.0 out
    assert longest_gap([5.0], 0.0, 10.0) is None
    assert longest_gap([], 0.0, 10.0) is None


def test_figures_measure_all_three_and_count_the_emails_of_the_load() -> None:
    figures = Figures.measure(
        answers((1, 10.0, NO), (2, 11.0, NO), (3, 13.0, OK), (1, 15.0, NO), (1, 16.0, OK)),
        [9.0, 12.0, 13.0, 30.0, 31.0],
        Span(10.0, 30.0),
    )

    assert figures.window == Span(10.0, 13.0)
    assert figures.delivery == Span(10.0, 16.0)
    assert figures.gap == Span(13.0, 30.0)
    assert figures.load_emails == 3


def test_the_rows_say_what_was_measured_and_when() -> None:
    rows = dict(
        Figures(Span(10.0, 13.5), Span(10.0, 16.0), Span(13.0, 30.0), Span(5.0, 40.0), 3).rows()
    )

    assert rows["longest 503 window"].startswith("3.5 s, from 10.0 s to 13.5 s")
    assert rows["longest refused delivery"].startswith("6.0 s, from 10.0 s to 16.0 s")
    assert rows["longest gap in replies"].startswith("17.0 s, from 13.0 s to 30.0 s")
    assert "3 emails" in rows["longest gap in replies"]


@pytest.mark.parametrize("label", ["longest 503 window", "longest refused delivery"])
def test_no_refusal_says_so(label: str) -> None:
    rows = dict(Figures(None, None, None, Span(0.0, 1.0), 0).rows())

    assert rows[label].startswith("none: no POST was refused")

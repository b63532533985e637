"""bench.mutation_report: mutmut's results as the committed report, without running mutmut."""

from __future__ import annotations

from bench.mutation_report import Mutant, Notes, render, score, status_of, tally

MUTANTS = [
    Mutant("m.x_f__mutmut_1", "m.py", "killed"),
    Mutant("m.x_f__mutmut_2", "m.py", "killed"),
    Mutant("m.x_f__mutmut_3", "m.py", "survived"),
    Mutant("m.x_f__mutmut_4", "m.py", "no tests"),
]
NOTES = Notes(
    equivalent={"m.x_f__mutmut_3": "the default is the same value"},
    killed_by={"m.x_f__mutmut_2": "tests/unit/test_m.py::test_f"},
    harmless={},
)


def test_exit_codes_map_to_killed_survived_and_no_tests_with_a_timeout_a_kill() -> None:
    assert [status_of(c) for c in (1, 36, 0, 33, None)] == [
        "killed",
        "killed",
        "survived",
        "no tests",
        "not checked",
    ]


def test_the_score_leaves_out_equivalent_mutants_and_counts_untested_ones_as_survived() -> None:
    counts = tally(MUTANTS, NOTES)

    assert (counts["killed"], counts["survived"], counts["equivalent"]) == (2, 1, 1)
    assert round(score(counts), 1) == 66.7


def test_the_report_lists_each_survivor_with_its_verdict_and_each_mended_one_with_its_test() -> (
    None
):
    report = render(MUTANTS, NOTES, seconds=90, when="2026-12-01", diff=lambda mutant: "`a` → `b`")

    assert "| `m.py` | 4 | 2 | 1 | 1 | 66.7 % |" in report
    assert "| `m.x_f__mutmut_2` | `a` → `b` | killed by `tests/unit/test_m.py::test_f` |" in report
    assert "equivalent: the default is the same value |" in report
    assert "| `m.x_f__mutmut_4` | `a` → `b` | **no tests, unexplained** |" in report
    assert "m.x_f__mutmut_1`" not in report

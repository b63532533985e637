"""The benchmark report: onceonly's figures as ratios to every baseline, and the markdown."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench._report import (
    Comparison,
    Figure,
    Section,
    chart,
    fmt_ratio,
    ratio,
    ratio_table,
    ratios,
    render,
    report_path,
    sections_body,
)

A = Figure("a", "(a) bare aiohttp", 4000.0, 10.0, 20.0)
B = Figure("b", "(b) + svix verify", 2000.0, 12.0, 25.0)
D = Figure("d", "(d) + svix + PostgreSQL INSERT", 800.0, 30.0, 80.0)
C = Figure("c", "(c) onceonly ingest", 1000.0, 15.0, 40.0)
INGEST = Comparison("deliveries/s", C, (A, B, D), {"d": 2.0})

PLAIN = Figure("plain", "plain faust agent (counts)", 2500.0)
WORKER = Figure("worker", "onceonly worker (replies)", 50.0)
PROCESSORS = Comparison("events/s", WORKER, (PLAIN,), {"plain": 0.5})


def rows_of(table: list[str]) -> dict[str, list[str]]:
    """Data rows of a markdown table, by their first cell."""
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    return {row[0]: row[1:] for row in cells}


def test_ratio_is_the_subject_over_the_baseline() -> None:
    assert ratios(INGEST) == {"a": 0.25, "b": 0.5, "d": 1.25}
    assert ratios(PROCESSORS) == {"plain": 0.02}


@pytest.mark.parametrize(
    ("value", "base"),
    [(1.0, 0.0), (1.0, -3.0), (math.nan, 1.0), (1.0, math.nan)],
)
def test_ratio_without_a_usable_baseline_is_nan(value: float, base: float) -> None:
    assert math.isnan(ratio(value, base))


def test_ratios_are_printed_to_three_significant_digits() -> None:
    assert fmt_ratio(0.5) == "0.5"
    assert fmt_ratio(0.0136) == "0.0136"
    assert fmt_ratio(1.2345) == "1.23"
    assert fmt_ratio(math.nan) == "n/a"


def test_the_ratio_table_has_a_row_for_every_baseline_with_the_ratios() -> None:
    rows = rows_of(ratio_table(INGEST))
    assert list(rows) == [A.label, B.label, D.label]
    # baseline rate, subject rate, throughput ratio, baseline p99, p50 ratio, p99 ratio, target
    assert rows[A.label] == ["4,000", "1,000", "0.25", "20.00", "1.5", "2", ""]
    assert rows[B.label][2] == "0.5"
    assert rows[D.label][2] == "1.25"
    assert rows[D.label][-1] == ">= 2: NOT met"


def test_a_met_target_says_so() -> None:
    rows = rows_of(ratio_table(Comparison("deliveries/s", C, (B,), {"b": 0.4})))
    assert rows[B.label][-1] == ">= 0.4: met"


def test_without_latencies_the_table_has_throughput_only() -> None:
    table = ratio_table(PROCESSORS)
    assert "p99" not in table[0]
    assert rows_of(table)[PLAIN.label] == ["2,500", "50", "0.02", ">= 0.5: NOT met"]


def test_a_zero_baseline_gives_na_not_an_error() -> None:
    broken = Figure("a", "(a) bare aiohttp", 0.0, math.nan, math.nan)
    rows = rows_of(ratio_table(Comparison("deliveries/s", C, (broken,))))
    assert rows[broken.label][2] == "n/a"


def make_report(chart_file: str | None = "bench-2026-12-01.png") -> str:
    sections = [
        Section("Ingest", INGEST, ["ingest figures table"], ["load: 64 connections"]),
        Section("Processors", PROCESSORS, ["processor figures table"], ["records: 300"]),
    ]
    about = [("cores", "2 logical"), ("Kafka", "4.1.1"), ("code", "abc1234")]
    command = "`python -m bench`"
    body = sections_body(sections)
    return render("onceonly benchmark, 2026-12-01", body, about, command, chart_file)


def test_the_report_names_every_baseline_and_gives_the_ratios() -> None:
    text = make_report()
    assert text.startswith("# onceonly benchmark, 2026-12-01\n")
    for figure in (A, B, D, PLAIN):
        assert f"| {figure.label} |" in text
    assert "| 0.25 |" in text and "| 1.25 |" in text and "| 0.02 |" in text
    assert text.index("## Ingest") < text.index("## Processors") < text.index("## Machine")
    assert "ingest figures table" in text and "processor figures table" in text


def test_the_report_has_the_machine_the_command_and_the_chart() -> None:
    text = make_report()
    assert "| cores | 2 logical |" in text
    assert "| code | abc1234 |" in text
    assert "`python -m bench`" in text
    assert "![throughput and latency of every variant](bench-2026-12-01.png)" in text
    assert "  - load: 64 connections" in text
    assert "## Chart" not in make_report(chart_file=None)


def test_invalid_figures_are_flagged_at_the_top() -> None:
    section = Section("Ingest", INGEST, [], [], invalid="3 requests were not answered 204")
    text = render("t, 2026-12-01", sections_body([section]), [], "`python -m bench`")
    first = text.splitlines()[4]
    assert first == "**INVALID INGEST FIGURES: 3 requests were not answered 204**"


def test_the_chart_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "chart.png"
    chart([INGEST, PROCESSORS], path, "onceonly benchmark, 2026-12-01")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_first_report_of_a_day_is_named_after_the_day(tmp_path: Path) -> None:
    assert report_path(tmp_path, "ingest", "2026-12-02").name == "ingest-2026-12-02.md"


def test_a_second_run_on_the_same_day_does_not_overwrite_the_first(tmp_path: Path) -> None:
    (tmp_path / "ingest-2026-12-02.md").write_text("cited")
    second = report_path(tmp_path, "ingest", "2026-12-02")
    second.write_text("new")
    third = report_path(tmp_path, "ingest", "2026-12-02")

    assert (second.name, third.name) == ("ingest-2026-12-02-2.md", "ingest-2026-12-02-3.md")

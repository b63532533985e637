"""``bench.cli_start`` times the command's start both ways and prints their ratios."""

from __future__ import annotations

import sys

from click.testing import CliRunner

from bench.cli_start import main, timed


def test_a_run_is_timed_in_wall_and_cpu_seconds() -> None:
    wall, cpu = timed([sys.executable, "-c", "sum(range(3_000_000))"])

    assert wall >= cpu > 0


def test_it_prints_both_ways_and_the_ratios() -> None:
    result = CliRunner().invoke(main, ["--runs", "1"])

    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()] == ["now", "before", "now"]

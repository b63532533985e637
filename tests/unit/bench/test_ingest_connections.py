"""The ingest benchmark's closed loops at several counts of connections: each server's
peak is its fastest, and the report says what each count gave."""

from __future__ import annotations

import click
import pytest

from bench._ingest_report import rounds_lines
from bench._ingest_results import Run, fastest, verdict
from bench._load import Sample
from bench._options import connection_counts


def _run(key: str, rate: float, connections: int, failed: int = 0) -> Run:
    sample = Sample(duration_s=1.0)
    sample.statuses["204"] = int(rate)
    if failed:
        sample.statuses["503"] = failed
    return Run(key, f"({key})", sample, {"server": 50.0}, connections=connections)


def test_counts_are_read_distinct_and_ascending() -> None:
    assert connection_counts("128,64,128") == (64, 128)


@pytest.mark.parametrize("text", ["64,many", "0,64", "64,257", ""])
def test_a_bad_count_is_refused_with_what_is_wrong(text: str) -> None:
    with pytest.raises(click.BadParameter, match=repr(text)):
        connection_counts(text)


def test_the_peak_is_the_fastest_count_and_each_count_s_rate_is_kept() -> None:
    best = fastest([_run("c", 8_800, 64), _run("c", 10_400, 128)])

    assert (best.connections, best.peak.rate) == (128, 10_400)
    assert best.tried == {64: 8_800, 128: 10_400}


def test_failures_at_a_slower_count_still_invalidate_the_run() -> None:
    best = fastest([_run("c", 8_800, 64, failed=3), _run("c", 10_400, 128)])

    assert verdict([best]).failed == 3
    assert best.peak.rate == 10_400  # the failures add to the failed, not to the rate


def test_the_report_gives_each_count_s_rate_round_by_round() -> None:
    rounds = [
        [fastest([_run("b", 12_500, 64), _run("b", 11_800, 128)]),
         fastest([_run("c", 8_800, 64), _run("c", 10_400, 128)])],
        [fastest([_run("b", 12_000, 64), _run("b", 11_700, 128)]),
         fastest([_run("c", 8_600, 64), _run("c", 10_100, 128)])],
    ]  # fmt: skip

    line = next(text for text in rounds_lines(rounds) if "connections" in text)

    assert "at 64/128 connections" in line
    assert "(b) 12,500/11,800, 12,000/11,700" in line
    assert "(c) 8,800/10,400, 8,600/10,100" in line

"""The flow-control benchmark's figures."""

from __future__ import annotations

import math

from bench import flow as fig
from bench._load import per_second, percentile


def test_the_most_in_a_window_counts_a_half_open_window() -> None:
    assert fig.most_in_window([0, 1, 2, 60, 61], 60) == 3
    assert fig.most_in_window([0, 59.9, 60], 60) == 2
    assert fig.most_in_window([], 60) == 0


def test_the_rate_is_from_the_first_to_the_last() -> None:
    assert per_second([0, 1, 2, 3, 4]) == 1.0
    assert math.isnan(per_second([5]))


def test_the_percentile_is_nearest_rank() -> None:
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([3.0], 0.99) == 3.0
    assert math.isnan(percentile([], 0.5))


def test_the_probes_are_the_429s_after_the_first_wave_and_before_the_end() -> None:
    refused = [10.0, 10.01, 10.02, 12.1, 14.2, 16.3, 21.0]
    assert fig.probes_in_pause(refused, 10.0, 20.0) == [12.1, 14.2, 16.3]
    assert fig.gaps([12.1, 14.2]) == [14.2 - 12.1]

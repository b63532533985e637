"""The latency sweep's --rates option."""

from __future__ import annotations

import click
import pytest

from bench.ingest_latency import _rates


def test_rates_are_comma_separated_numbers() -> None:
    assert _rates("1000, 2500.5,") == [1000.0, 2500.5]


@pytest.mark.parametrize("value", ["", "fast", "1000,0", "-5"])
def test_no_rate_a_zero_or_a_word_is_refused_saying_what_to_give(value: str) -> None:
    with pytest.raises(click.BadParameter, match="rate"):
        _rates(value)

"""Property tests run without Hypothesis's per-example deadline (tests/conftest.py): a
timing check that failed CI on a loaded machine is the benchmarks' question, not theirs."""

from hypothesis import settings


def test_the_property_tests_have_no_deadline() -> None:
    assert settings().deadline is None

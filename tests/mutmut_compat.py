"""A pytest plugin for ``make mutate`` only (``-p tests.mutmut_compat``, see pyproject.toml).

mutmut 3.7 maps tests to the functions they call through ``item._nodeid``, which pytest 9
no longer has (``nodeid`` is a property now). mutmut 3.8 reads ``nodeid``, but needs
click>=8.4, which faust-streaming refuses; until then each item gets the attribute back.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item._nodeid = item.nodeid  # type: ignore[attr-defined]

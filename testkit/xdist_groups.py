"""The pytest plugin that keeps the tests of one expensive session fixture on one xdist worker.

Under ``pytest -n 2 --dist loadgroup`` each worker builds its own session fixtures, so a
three-node cluster that tests on both workers ask for starts twice (six JVMs). The plugin marks
every test that asks for one of ``fixtures`` with one ``xdist_group``, so they all run on one
worker and the cluster starts once. pytest-xdist's own ``pytest_collection_modifyitems`` on
the worker turns that mark into the node id's ``@group`` suffix its scheduler reads, so the
mark must be placed first: a plugin registered in ``pytest_configure`` comes after xdist's
worker plugin and pluggy calls later plugins first, and ``tryfirst`` keeps it so however it
is registered. The suffix needs pytest below 9.2 (pytest-dev/pytest-xdist#1386; pyproject.toml).
Register it in ``pytest_configure``: ``config.pluginmanager.register(GroupByFixture(...))``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

GROUP = "clusters"


def mark_groups(items: Iterable[pytest.Item], fixtures: Iterable[str], group: str = GROUP) -> int:
    """Mark each item that asks for one of ``fixtures`` (directly or through another
    fixture) with ``xdist_group(group)``; the number marked."""
    wanted = frozenset(fixtures)
    marked = 0
    for item in items:
        if wanted.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(group))
            marked += 1
    return marked


class GroupByFixture:
    """A plugin: the tests asking for any of ``fixtures`` share the xdist group ``group``."""

    def __init__(self, fixtures: Iterable[str], group: str = GROUP) -> None:
        self.fixtures = tuple(fixtures)
        self.group = group

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        mark_groups(items, self.fixtures, self.group)

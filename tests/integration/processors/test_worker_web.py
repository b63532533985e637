"""The worker's web port serves what onceonly needs, and none of faust's own views."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from tests.integration.workers import Stack, until

pytestmark = pytest.mark.integration


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def test_faust_views_that_show_tables_are_not_served(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    worker = stack.worker()
    await until(stack, lambda: bool(worker.metrics()), "the worker's web port")

    answers = {path: _status(worker.port, path) for path in ("/table/replies/", "/router/")}

    assert answers == {"/table/replies/": 404, "/router/": 404}
    assert _status(worker.port, "/metrics") == 200

"""No module of the product or its tools over 400 lines, no function over 60.

The local servers that mirror a provider's whole API (``testkit/fakes/*_server.py``) are
the one exception, as the house rules allow. Tests are not held to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "devstack",
    "testkit",
    "onceonly",
    "bench",
    "chaos",
]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
API_MIRRORS = {"agentmail_server.py", "nylas_server.py"}


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_no_module_is_over_400_lines(path: Path) -> None:
    if path.parent.name == "fakes" and path.name in API_MIRRORS:
        pytest.skip("a fake that mirrors a whole API")
    lines = len(path.read_text().splitlines())

    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines; split it by job"


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_no_function_is_over_60_lines(path: Path) -> None:
    if path.parent.name == "fakes" and path.name in API_MIRRORS:
        pytest.skip("a fake that mirrors a whole API")
    tree = ast.parse(path.read_text())
    long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]

    assert not long, f"{_name(path)}: {long}"

"""Every import points down: records, foundation, services, operations, the command.

The layer order is written once, here. A package may import its own modules and any
package of a lower layer; never one of its own layer or above. Imports inside functions
count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: list[set[str]] = [
    {"schemas"},  # records on every topic, versioned; the root error
    {"foundation"},  # errors, settings, logging, the Kafka seam
    {"ingest", "processors"},  # the two services
    {"operations", "devstack", "testkit"},  # replay, catch-up...; the local stack; test support
    {"onceonly"},  # the command: parses and prints
]
LAYER_OF = {package: n for n, packages in enumerate(LAYERS) for package in packages}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for package in LAYER_OF for p in (ROOT / package).rglob("*.py"))


def test_every_product_package_is_in_a_layer() -> None:
    ours = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}

    assert ours - {"tests", "bench", "chaos"} == set(LAYER_OF)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_its_own_layer_or_above(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    upward = [
        f"line {line}: {name}"
        for line, name in _imports(path)
        if (top := name.split(".")[0]) in LAYER_OF
        and top != package
        and LAYER_OF[top] >= LAYER_OF[package]
    ]

    assert not upward, f"{package} (layer {LAYER_OF[package]}) imports upwards: {upward}"

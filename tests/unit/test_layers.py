"""Every import points down: records, foundation, services, operations, the command, the
public surface; and the product never imports the checkout's development tools.

The layer order is written once, here. A package may import its own modules and any
package of a lower layer; never one of its own layer or above. Imports inside functions
count too. Inside the processors, floors of their own: what the mail providers share with
the rest (``messages.py``, ``exceptions.py``), the mail providers, the rest, and the
runtime on top (docs/architecture.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "onceonly"

LAYERS: list[set[str]] = [
    {"onceonly.schemas"},  # records on every topic, versioned; the root error
    {"onceonly.foundation"},  # errors, settings, logging, the Kafka seam
    {"onceonly.ingest", "onceonly.processors"},  # the two services
    {"onceonly.operations"},  # replay, catch-up, trace, the operator page
    {"onceonly.cli"},  # the command: parses and prints
    {"onceonly"},  # the public surface: onceonly/__init__.py, onceonly.testing
]
LAYER_OF = {package: n for n, packages in enumerate(LAYERS) for package in packages}
#: the checkout's tools: they may import the product, never the other way round
DEVELOPMENT = {"devstack", "testkit", "bench", "chaos", "tests"}


def _statements(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """Each absolute import: its line, the module, and the names taken from it (none for
    ``import module``)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def _imports(path: Path) -> list[tuple[int, str]]:
    return [(line, module) for line, module, _ in _statements(path)]


def layer_package(dotted: str) -> str | None:
    """The layer package that holds module ``dotted`` (the longest prefix in the layers)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:n])) in LAYER_OF:
            return prefix
    return None


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> list[Path]:
    return sorted(PRODUCT.rglob("*.py"))


def test_every_product_package_is_in_a_layer() -> None:
    ours = {f"onceonly.{p.name}" for p in PRODUCT.iterdir() if (p / "__init__.py").exists()}

    assert ours | {"onceonly"} == set(LAYER_OF)


def test_the_repository_has_one_product_package_beside_the_development_tools() -> None:
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}

    assert top == {"onceonly"} | DEVELOPMENT


def test_layer_package_is_the_longest_prefix() -> None:
    assert layer_package("onceonly.processors.mail.agentmail.sender") == "onceonly.processors"
    assert layer_package("onceonly.testing") == "onceonly"
    assert layer_package("onceonly_other") is None
    assert layer_package("faust") is None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_its_own_layer_or_above(path: Path) -> None:
    package = layer_package(_dotted(path))
    assert package is not None
    upward = [
        f"line {line}: {name}"
        for line, name in _imports(path)
        if (target := layer_package(name)) is not None
        and target != package
        and LAYER_OF[target] >= LAYER_OF[package]
    ]

    assert not upward, f"{package} (layer {LAYER_OF[package]}) imports upwards: {upward}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_product_never_imports_the_development_tools(path: Path) -> None:
    found = [
        f"line {line}: {name}" for line, name in _imports(path) if name.split(".")[0] in DEVELOPMENT
    ]

    assert not found, f"{_dotted(path)} imports the checkout's tools: {found}"


#: each third-party framework behind its seams: only those packages import it. rocksdict
#: has two: the worker's tables, and the operator index's one store module
SEAMS: dict[str, tuple[str, ...]] = {
    "faust": ("onceonly.processors.runtime",),
    "mode": ("onceonly.processors.runtime",),
    "aiokafka": ("onceonly.processors.runtime",),
    "rocksdict": ("onceonly.processors.runtime", "onceonly.operations.index.store"),
    "confluent_kafka": ("onceonly.foundation.kafka",),
    "agentmail": ("onceonly.processors.mail.agentmail",),
    "nylas": ("onceonly.processors.mail.nylas",),
}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_framework_is_imported_only_behind_its_seam(path: Path) -> None:
    module = _dotted(path)
    outside = [
        f"line {line}: {name} (only {' or '.join(SEAMS[top])} may)"
        for line, name in _imports(path)
        if (top := name.split(".")[0]) in SEAMS
        and not any(module == seam or module.startswith(seam + ".") for seam in SEAMS[top])
    ]

    assert not outside, f"{module} reaches past a seam: {outside}"


#: the mail providers are a floor below the rest of the worker: besides the lower layers
#: and their own package, they import only the messages they share with it and the
#: processors' errors. A provider author reads nothing of the reply path, the writer,
#: approval, flow or the router to write a provider.
MAIL = "onceonly.processors.mail"
#: what the mail providers share with the rest of the worker; each imports nothing of the
#: processors itself, so it stays below both
BENEATH_MAIL = {"onceonly.processors.messages", "onceonly.processors.exceptions"}


def _within(dotted: str, package: str) -> bool:
    return dotted == package or dotted.startswith(package + ".")


def _targets(path: Path) -> list[tuple[int, str]]:
    """What each import of ours reaches: ``from package import module`` reaches the
    module, ``from module import name`` the module."""
    found: list[tuple[int, str]] = []
    for line, module, names in _statements(path):
        if not names:
            found.append((line, module))
        for name in names:
            inner = f"{module}.{name}"
            is_module = (ROOT / inner.replace(".", "/")).with_suffix(".py").exists() or (
                ROOT / inner.replace(".", "/") / "__init__.py"
            ).exists()
            found.append((line, inner if is_module else module))
    return [(line, name) for line, name in found if _within(name, "onceonly.processors")]


def upward_from_mail(path: Path) -> list[str]:
    """The imports of a module under ``onceonly.processors.mail`` that reach the worker
    above it: any module of the processors outside mail/ and :data:`BENEATH_MAIL`."""
    return [
        f"line {line}: {name}"
        for line, name in sorted(set(_targets(path)))
        if not _within(name, MAIL) and name not in BENEATH_MAIL
    ]


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if _within(_dotted(p), MAIL)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_mail_providers_import_nothing_of_the_worker_above_them(path: Path) -> None:
    upward = upward_from_mail(path)

    assert not upward, f"{_dotted(path)} reaches above the mail providers: {upward}"


@pytest.mark.parametrize("module", sorted(BENEATH_MAIL))
def test_what_the_mail_providers_share_imports_nothing_of_the_processors(module: str) -> None:
    path = (ROOT / module.replace(".", "/")).with_suffix(".py")

    assert _targets(path) == [], f"{module} must stay beneath mail/ and the rest alike"


def test_the_mail_rule_sees_each_way_up(tmp_path: Path) -> None:
    module = tmp_path / "provider.py"
    module.write_text(
        "from onceonly.processors.reply.once import reply_once\n"
        "from onceonly.processors import conversation\n"
        "import onceonly.processors.writer.contract\n"
        "def later() -> None:\n"
        "    from onceonly.processors.flow.rate import retry_after_s\n"
        "from onceonly.processors.messages import Inbound\n"
        "from onceonly.processors.mail.protocol import MailClient\n"
        "from onceonly.foundation.settings import Settings\n"
    )

    assert upward_from_mail(module) == [
        "line 1: onceonly.processors.reply.once",
        "line 2: onceonly.processors.conversation",
        "line 3: onceonly.processors.writer.contract",
        "line 5: onceonly.processors.flow.rate",
    ]


#: the top floor of the processors: the one seam over faust wires the rest into a worker;
#: nothing else of the processors imports it (the operator page and the command, above)
RUNTIME = "onceonly.processors.runtime"


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in _modules()
        if _within(_dotted(p), "onceonly.processors") and not _within(_dotted(p), RUNTIME)
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_the_runtime_imports_the_runtime(path: Path) -> None:
    found = [f"line {line}: {name}" for line, name in _targets(path) if _within(name, RUNTIME)]

    assert not found, f"{_dotted(path)} imports the runtime, the processors' top: {found}"

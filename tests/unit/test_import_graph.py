"""No circles in onceonly's imports: a newcomer can read any module knowing only those below.

The graph is computed from the source (ast), not by importing it. Its nodes are the
modules of ``onceonly``; an edge is an import statement naming another of them, wherever
it stands: at the top, inside a function (a deferred import is the usual way a circle is
hidden from the interpreter), and inside ``if TYPE_CHECKING:`` too (a type-only circle is
still two modules that must be read together: the one between
``foundation/providers.py`` and ``foundation/settings.py`` was one). ``from package
import module`` is an edge to the module, ``from module import name`` to the module.
Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``; those implicit
edges are left out (every module would otherwise circle through ``onceonly/__init__.py``).

The same graph, with each module standing for its package, holds the packages to no circle
between siblings (``processors/reply`` and ``processors/writer`` each importing the
other); a package and its own sub-packages may import each other (``mail/registry.py``
lists ``mail/agentmail/``, which imports ``mail/protocol.py``).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "onceonly"

Graph = Mapping[str, Set[str]]


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _named(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each import anywhere in ``tree``: ``import a.b`` is (a.b, None),
    ``from a import b`` is (a, b); relative imports resolved against ``module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield from ((base, alias.name) for alias in node.names)


def imports_of(source: str, module: str, known: Set[str], *, is_package: bool = False) -> set[str]:
    """The modules of ``known`` that ``source`` (module ``module``) imports."""
    found: set[str] = set()
    for base, name in _named(ast.parse(source), module, is_package):
        if name is not None and f"{base}.{name}" in known:
            found.add(f"{base}.{name}")
        elif base in known:
            found.add(base)
    found.discard(module)
    return found


def module_graph() -> dict[str, set[str]]:
    """Each module of onceonly -> the modules of onceonly it imports."""
    paths = {_dotted(p): p for p in sorted(PRODUCT.rglob("*.py"))}
    return {
        module: imports_of(
            path.read_text(), module, paths.keys(), is_package=path.name == "__init__.py"
        )
        for module, path in paths.items()
    }


def package_graph(modules: Graph) -> dict[str, set[str]]:
    """Each package -> the packages its modules import, a package's own ancestors and
    descendants left out."""
    is_package = {m for m in modules if (PRODUCT.parent / m.replace(".", "/")).is_dir()}

    def package(module: str) -> str:
        return module if module in is_package else module.rpartition(".")[0]

    def related(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    graph: dict[str, set[str]] = {package(m): set() for m in modules}
    for module, targets in modules.items():
        here = package(module)
        graph[here].update(p for t in targets if not related(here, p := package(t)))
    return graph


def _components(graph: Graph) -> list[set[str]]:
    """The strongly connected components of ``graph`` (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            following = next((t for t in edges if t in graph), None)
            if following is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while (member := stack.pop()) != node:
                        on_stack.discard(member)
                        component.add(member)
                    on_stack.discard(node)
                    found.append({*component, node})
            elif following not in index:
                index[following] = low[following] = len(index)
                stack.append(following)
                on_stack.add(following)
                work.append((following, iter(sorted(graph[following]))))
            elif following in on_stack:
                low[node] = min(low[node], index[following])
    return found


def _loop(graph: Graph, members: set[str]) -> list[str]:
    """One shortest circle through the component's first member, as a path that returns."""
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for following in sorted(graph[node] & members):
            if following == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if following not in came_from:
                came_from[following] = node
                queue.append(following)
    raise AssertionError(f"no circle through {start}")  # pragma: no cover


def cycles(graph: Graph) -> list[list[str]]:
    """One circle per knot of ``graph``, each a path ``a -> ... -> a``."""
    knots = [c for c in _components(graph) if len(c) > 1 or any(n in graph[n] for n in c)]
    return sorted(_loop(graph, knot) for knot in knots)


def _shown(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(circle) for circle in found)


def test_no_module_imports_itself_back() -> None:
    found = cycles(module_graph())

    assert not found, f"import circles:\n{_shown(found)}"


def test_no_package_imports_a_sibling_that_imports_it_back() -> None:
    found = cycles(package_graph(module_graph()))

    assert not found, f"circles between packages:\n{_shown(found)}"


def test_the_graph_counts_imports_in_functions_and_type_checking_blocks() -> None:
    known = {"p", "p.a", "p.b", "p.c", "p.d", "p.e"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "import p.a\n"
        "from p import b\n"
        "from p.c import Thing\n"
        "if TYPE_CHECKING:\n"
        "    from p.d import Other\n"
        "def later() -> None:\n"
        "    from . import e\n"
    )

    assert imports_of(source, "p.x", known) == {"p.a", "p.b", "p.c", "p.d", "p.e"}


def test_each_circle_is_shown_as_a_path_back_to_its_start() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"a"}}

    assert cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_packages_circle_between_siblings_never_with_their_own_parts() -> None:
    modules = {
        "onceonly.processors.reply.once": {"onceonly.processors.writer.contract"},
        "onceonly.processors.writer.loading": {"onceonly.processors.reply.once"},
        "onceonly.processors.writer.contract": set(),
        "onceonly.processors.mail.registry": {"onceonly.processors.mail.nylas.channel"},
        "onceonly.processors.mail.nylas.channel": {"onceonly.processors.mail.registry"},
    }

    assert cycles(package_graph(modules)) == [
        ["onceonly.processors.reply", "onceonly.processors.writer", "onceonly.processors.reply"]
    ]

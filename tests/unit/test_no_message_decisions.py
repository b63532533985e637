"""Nothing in onceonly decides anything by a third-party exception's message text.

A library's wording is not its interface: svix 2.9.1 changed "Invalid Signature Headers" to
"No matching signature found" for the same headers, and ingest, which sorted svix's errors
by their text, answered ``bad_signature`` for what it had called ``malformed_header``. An
exception is told apart by its type or its documented fields (a ``KafkaError``'s code, an
HTTP status), never by what ``str(exc)`` says. Passing the text on to a log or a message
is fine; comparing it, searching it or calling a method on it is a decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

import onceonly

PACKAGE = Path(onceonly.__file__).parent
_RE_FUNCTIONS = {"match", "fullmatch", "search", "findall", "sub", "split"}


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _reads_message(node: ast.AST, exc: str, texts: set[str]) -> bool:
    """``str(exc)``, ``repr(exc)``, ``f"{exc}"``, a text field (``exc.message``, ...), or a
    name that holds one of those (``texts``). ``exc.args[0].code()`` and other structured
    fields are not text."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in texts:
            return True
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id in {"str", "repr", "format"}
            and any(_mentions(a, {exc}) for a in sub.args)
        ):
            return True
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == exc
            and sub.attr in {"message", "user_message", "msg", "detail", "reason", "strerror"}
        ):
            return True
        if isinstance(sub, ast.FormattedValue) and _mentions(sub.value, {exc}):
            return True
    return False


def _decisions_on_message(tree: ast.AST) -> list[int]:
    lines: list[int] = []
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or handler.name is None:
            continue
        exc, texts = handler.name, set[str]()
        nodes = [n for stmt in handler.body for n in ast.walk(stmt)]
        for node in nodes:  # names bound to the text, in the handler's order
            if isinstance(node, ast.Assign) and _reads_message(node.value, exc, texts):
                texts |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in nodes:
            if isinstance(node, ast.Compare) and _reads_message(node, exc, texts):
                lines.append(node.lineno)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                is_re = isinstance(receiver, ast.Name) and receiver.id == "re"
                if is_re and node.func.attr in _RE_FUNCTIONS:
                    if any(_reads_message(a, exc, texts) for a in node.args):
                        lines.append(node.lineno)
                elif _reads_message(receiver, exc, texts):
                    lines.append(node.lineno)  # str(exc).startswith(...), .lower(), ...
    return sorted(set(lines))


def _found(source: str) -> list[int]:
    return _decisions_on_message(ast.parse(source))


def test_no_module_of_onceonly_decides_by_an_exception_message() -> None:
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _found(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"decisions on exception text (file: lines): {found}"


def test_the_check_finds_the_table_ingest_had() -> None:
    """The shape that broke on svix 2.9.1, and its kin, are found; passing text on is not."""
    decided = """
try:
    verify()
except Error as exc:
    message = str(getattr(exc, "user_message", None) or exc)
    known = [(p, c) for p, c in TABLE if message.startswith(p)]
    if str(exc).startswith("Invalid Signature Headers"):
        pass
    if "timeout" in str(exc.args[0]):
        pass
    if re.search("too old", str(exc)):
        pass
    if f"{exc}" == "x":
        pass
    if exc.args[0].code() == TIMED_OUT:
        pass
"""
    assert _found(decided) == [6, 7, 9, 11, 13]
    passed_on = """
try:
    verify()
except Error as exc:
    log.warning("failed", error=str(exc))
    raise Other(f"could not verify: {exc}") from exc
"""
    assert _found(passed_on) == []

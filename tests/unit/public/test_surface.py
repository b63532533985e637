"""What a user imports: ``onceonly``'s ``__all__``, each name documented and importable."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import onceonly
import onceonly.testing

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "reference.md"


def documented() -> set[str]:
    """The names the API reference renders (``::: onceonly.<name>``; the testing module is
    its own section), and the version."""
    rendered = re.findall(r"^::: onceonly\.(\w+)$", REFERENCE.read_text(encoding="utf-8"), re.M)
    return (set(rendered) - {"testing"}) | {"__version__"}


#: the documented surface; a change here is a change to every user's code
PUBLIC = documented()


def test_all_is_the_documented_surface() -> None:
    assert set(onceonly.__all__) == PUBLIC


def test_every_public_name_resolves_and_has_a_docstring() -> None:
    undocumented = [
        name
        for name in onceonly.__all__
        if name != "__version__" and not (getattr(onceonly, name).__doc__ or "").strip()
    ]

    assert not undocumented


def test_star_import_gives_exactly_the_surface() -> None:
    namespace: dict[str, object] = {}
    exec("from onceonly import *", namespace)

    assert set(namespace) - {"__builtins__"} == PUBLIC


def test_the_testing_module_exports_what_it_documents() -> None:
    assert set(onceonly.testing.__all__) == {"MemoryLedger", "call_writer", "inbound", "make_burst"}
    for name in onceonly.testing.__all__:
        assert getattr(onceonly.testing, name).__doc__


def test_the_messages_are_one_class_wherever_they_are_imported_from() -> None:
    """The providers and the reply path share them from below both; the writer's contract
    and the surface hand out the same classes, not copies."""
    from onceonly.processors import messages
    from onceonly.processors.writer import contract

    assert onceonly.Inbound is contract.Inbound is messages.Inbound
    assert onceonly.ThreadMessage is contract.ThreadMessage is messages.ThreadMessage
    assert type(onceonly.testing.inbound("hi")) is messages.Inbound


def test_the_errors_share_one_root() -> None:
    for name in ("ConfigError", "EffectConflict", "WriterFailed"):
        assert issubclass(getattr(onceonly, name), onceonly.OnceOnlyError)


def test_importing_onceonly_starts_no_stream_framework() -> None:
    """A writer's module imports ``onceonly``; that must not pull faust or Kafka clients."""
    code = (
        "import sys, onceonly, onceonly.testing; "
        "print(sorted(m for m in ('faust', 'aiokafka', 'confluent_kafka', 'rocksdict') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[]"


def test_the_version_is_the_distributions() -> None:
    metadata = importlib.import_module("importlib.metadata")

    assert onceonly.__version__ == metadata.version("onceonly")

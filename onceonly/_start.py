"""The ``onceonly`` process's entry point (the console script and ``python -m onceonly``).

structlog imports rich at its own import, when rich is installed, for its pretty
tracebacks: about 0.1 s of every command's start (``python -X importtime``), a tenth of
the second an operator's ``trace`` or ``approvals list`` has (issue 45). The command
renders plain tracebacks, so it imports structlog with rich hidden, before anything else
imports it; rich itself stays importable for the command's tables and progress bars. A
writer's or an application's own import of structlog is not touched: this runs only
where the ``onceonly`` command starts.
"""

from __future__ import annotations

import importlib
import sys


def structlog_without_rich() -> None:
    """Import structlog (and its modules that look for rich) with rich hidden; a no-op
    once structlog is imported."""
    if "structlog" in sys.modules:
        return
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_rich(name)}
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        for name in ("structlog", "structlog.dev", "structlog.tracebacks"):
            importlib.import_module(name)
    finally:
        del sys.modules["rich"]
        sys.modules.update(hidden)


def _is_rich(name: str) -> bool:
    return name == "rich" or name.startswith("rich.")


def run() -> None:
    structlog_without_rich()
    from onceonly.cli import run as command

    command()

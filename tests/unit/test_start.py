"""The ``onceonly`` command's entry imports structlog with rich hidden (issue 45: a tenth
of a second of every operator command's start); rich stays importable."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_command_imports_structlog_with_rich_hidden() -> None:
    found = _python(
        "import sys; from onceonly._start import structlog_without_rich; "
        "structlog_without_rich(); import structlog.dev, structlog.tracebacks; "
        "print(structlog.dev.rich, structlog.tracebacks.rich, 'rich' in sys.modules)"
    )

    assert found == "None None False"


def test_rich_stays_importable_for_the_commands_tables() -> None:
    found = _python(
        "from onceonly._start import structlog_without_rich; structlog_without_rich(); "
        "from rich.table import Table; print(Table.__name__)"
    )

    assert found == "Table"


def test_a_rich_module_imported_before_is_the_same_module_after() -> None:
    found = _python(
        "import rich.console; first = rich.console; "
        "from onceonly._start import structlog_without_rich; structlog_without_rich(); "
        "import rich.console; print(rich.console is first)"
    )

    assert found == "True"


def test_python_m_onceonly_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onceonly", "trace", "--help"], capture_output=True, text=True
    )

    assert done.returncode == 0 and "Usage:" in done.stdout

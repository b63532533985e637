"""What ``python -m bench.ingest_cpu`` compares: ingest variants, ``NAME[@DIR][,VAR=VALUE...]``
(e.g. ``main@/tmp/main``, ``linger10,ONCEONLY_PRODUCE_LINGER_MS=10``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Variant:
    """One ingest to measure: ``code`` is a checkout's root (None: this one)."""

    name: str
    code: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


def parse_variant(spec: str) -> Variant:
    """The :class:`Variant` of ``spec``; ValueError saying what is wrong with it."""
    head, *assignments = spec.split(",")
    name, at, code = head.partition("@")
    if not _NAME.match(name):
        raise ValueError(f"variant {spec!r}: a name of letters, digits and _.+- comes first")
    if at and not code:
        raise ValueError(f"variant {spec!r}: '@' needs a directory after it")
    env: dict[str, str] = {}
    for assignment in assignments:
        variable, eq, value = assignment.partition("=")
        if not eq or not _VARIABLE.match(variable):
            raise ValueError(f"variant {spec!r}: {assignment!r} is not VARIABLE=VALUE")
        env[variable] = value
    return Variant(name, Path(code).resolve() if code else None, env)


def ingest_argv(python: str, variant: Variant) -> list[str]:
    """The command that runs ``onceonly ingest`` from ``variant``'s checkout: that
    checkout's packages first on the path (they shadow this one's editable install)."""
    if variant.code is None:
        return [python, "-m", "onceonly", "ingest"]
    root = str(variant.code)
    program = (
        "import os, runpy, sys; "
        f"os.chdir({root!r}); sys.path.insert(0, {root!r}); "
        "sys.argv = ['onceonly', 'ingest']; "
        "runpy.run_module('onceonly', run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", program]

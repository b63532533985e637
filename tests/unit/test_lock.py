"""The lock is what every machine installs, and it agrees with pyproject.toml.

``requirements/dev.lock`` is made by ``make lock`` (uv pip compile); these checks catch a
pyproject.toml changed without it, a pin without its hashes, and an image lock that drifted
from the one the tests ran.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devstack.deps import GUARDED, locked, ranges

ROOT = Path(__file__).resolve().parents[2]
DEV_LOCK = ROOT / "requirements" / "dev.lock"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    lines = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        lines += extra
    lines += PYPROJECT["build-system"]["requires"]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("req", _requirements(), ids=str)
def test_every_requirement_of_pyproject_is_met_by_a_pin_of_the_lock(req: Requirement) -> None:
    pins = locked(DEV_LOCK)
    name = canonicalize_name(req.name)
    assert name in pins, f"{req.name} is not in the lock: run make lock"
    assert req.specifier.contains(pins[name], prereleases=True), (
        f"the lock pins {req.name}=={pins[name]}, outside {req.specifier}: run make lock"
    )


@pytest.mark.parametrize("lock", [DEV_LOCK, RUNTIME_LOCK], ids=lambda p: p.name)
def test_every_pin_carries_its_hashes(lock: Path) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text(encoding="utf-8"))
    pinned = [entry for entry in entries if "==" in entry.split("\n")[0]]
    assert pinned
    unhashed = [e.split()[0] for e in pinned if "--hash=sha256:" not in e]
    assert unhashed == []


def test_the_image_runs_the_versions_the_tests_ran() -> None:
    dev, runtime = locked(DEV_LOCK), locked(RUNTIME_LOCK)
    assert {name: dev.get(name) for name in runtime} == runtime
    assert "onceonly" not in runtime and "pytest" not in runtime


def test_the_virtualenv_is_installed_from_the_lock_alone() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--require-hashes --no-deps -r $(LOCK)" in makefile
    # onceonly itself: no dependency resolved, the build backend from the lock
    assert "--no-deps --no-build-isolation -e ." in makefile


def test_the_guarded_libraries_are_dependencies_with_a_range() -> None:
    specs = ranges()
    for name in GUARDED:
        spec = specs[canonicalize_name(name)].specifier
        assert any(s.operator == ">=" for s in spec) and any(s.operator == "<" for s in spec), name


def test_the_locked_libraries_are_compiled_to_bytecode_at_install() -> None:
    # pip compiles at install and uv does not by default: uncompiled, every command starts
    # by compiling its libraries' modules from source when bytecode is not written
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [line for line in makefile.splitlines() if "uv pip install" in line]
    assert installs and all("--compile-bytecode" in line for line in installs)

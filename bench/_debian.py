"""Debian's packages that the benchmarks need (wrk, Go, PostgreSQL), installed where missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import TypeVar

from bench._procs import BenchError, console

T = TypeVar("T")


def debian_package(package: str, find: Callable[[], T | None], what: str) -> T:
    """What ``find`` finds; installs Debian's ``package`` with apt-get as root first when it
    finds nothing (``what``: the missing thing, in the message)."""
    found = find()
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise BenchError(
            f"{what} is not installed and this is not root: `sudo apt-get install {package}`"
        )
    console.print(f"installing Debian's {package} package (apt-get) …")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=False)
        subprocess.run(install, env=env, check=False)
    found = find()
    if found is None:
        raise BenchError(f"apt-get could not install {package}; see its output above")
    return found


def debian_command(command: str, package: str, *, also: tuple[str, ...] = ()) -> str:
    """The path of ``command`` (or of the first of ``also``, full paths, that exists)."""

    def find() -> str | None:
        return shutil.which(command) or next((p for p in also if os.access(p, os.X_OK)), None)

    return debian_package(package, find, command)

"""``python -m devstack deps newest|oldest``: drift seen before a user meets it.

The lock (``requirements/dev.lock``) is what every machine of ours installs; a user who
installs onceonly into an application of their own gets whatever ``pyproject.toml``'s ranges
allow. These jobs run the ingest and worker unit tests against the ends of those ranges, in
a throwaway virtualenv under ``.run/deps/``, built with uv from the lock:

- ``newest``: the libraries onceonly's guarantees rest on (``GUARDED``) upgraded to the
  newest versions their ranges allow;
- ``oldest``: the signature libraries (``SIGNATURE_LIBRARIES``) at the oldest versions their
  ranges allow (the rest as locked), against the ingest tests.

Each prints the versions it tested beside the locked ones, and exits with pytest's status.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "dev.lock"

#: The libraries whose behaviour a guarantee rests on: signatures, mail, the worker's runtime,
#: the Kafka client and the HTTP server.
GUARDED = (
    "svix",
    "standardwebhooks",
    "stripe",
    "agentmail",
    "nylas",
    "faust-streaming",
    "confluent-kafka",
    "aiohttp",
)
#: The libraries ingest verifies signatures with, tested at both ends of their ranges.
SIGNATURE_LIBRARIES = ("svix", "standardwebhooks")
#: What each job runs: the worker's and ingest's unit tests, the public surface's too.
NEWEST_TESTS = ("tests/unit/ingest", "tests/unit/processors", "tests/unit/public")
OLDEST_TESTS = ("tests/unit/ingest",)


@dataclass(frozen=True)
class Job:
    """One end of the ranges: which requirements to install over the lock, what to test."""

    name: str
    requirements: tuple[str, ...]
    tests: tuple[str, ...]


def ranges(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Requirement]:
    """The project's runtime dependencies by canonical name, as pyproject.toml states them."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = (Requirement(line) for line in project["dependencies"])
    return {canonicalize_name(req.name): req for req in found}


def locked(lock: Path = LOCK) -> dict[str, str]:
    """``name: version`` of every package the lock pins."""
    pins: dict[str, str] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, _, rest = line.partition("==")
            pins[canonicalize_name(name)] = rest.split()[0].split(";")[0]
    return pins


def requirement_lines(names: Iterable[str], specs: dict[str, Requirement]) -> tuple[str, ...]:
    """Each named library with its range from pyproject.toml (no extras, no markers)."""
    lines = []
    for name in names:
        req = specs.get(canonicalize_name(name))
        if req is None:
            raise SystemExit(f"{name} is not a dependency in pyproject.toml: update devstack/deps")
        lines.append(f"{req.name}{req.specifier}")
    return tuple(lines)


def _run(command: Sequence[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], check=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def _uv() -> Path:
    return Path(sys.executable).with_name("uv")


def oldest_pins(lines: Sequence[str], work: Path) -> tuple[str, ...]:
    """The oldest versions the ranges allow, as uv resolves them (lowest-direct)."""
    work.mkdir(parents=True, exist_ok=True)
    wanted = work / "oldest.in"
    wanted.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = _run(
        [_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version",
         "3.11", "--resolution", "lowest-direct", wanted],
        capture_output=True,
    ).stdout  # fmt: skip
    names = {canonicalize_name(Requirement(line).name) for line in lines}
    pins = (line.strip() for line in out.splitlines() if "==" in line)
    return tuple(pin for pin in pins if canonicalize_name(pin.split("==")[0]) in names)


def build(job: Job, work: Path) -> Path:
    """A virtualenv of the lock with ``job.requirements`` installed over it; its python."""
    venv = work / job.name
    _run([_uv(), "venv", "--quiet", "--clear", "--python", sys.executable, venv])
    python = venv / "bin" / "python"
    _run([_uv(), "pip", "install", "--quiet", "--python", python, "--require-hashes",
          "--no-deps", "-r", LOCK])  # fmt: skip
    _run([_uv(), "pip", "install", "--quiet", "--python", python, "--upgrade",
          *job.requirements])  # fmt: skip
    # onceonly itself, for its metadata (its version); the checkout's tools by PYTHONPATH
    _run([_uv(), "pip", "install", "--quiet", "--python", python, "--no-deps",
          "--no-build-isolation", "-e", ROOT])  # fmt: skip
    return python


def installed(python: Path) -> dict[str, str]:
    out = _run([_uv(), "pip", "freeze", "--python", python], capture_output=True).stdout
    pins = (line.split("==") for line in out.splitlines() if "==" in line)
    return {canonicalize_name(name): version for name, version in pins}


def report(job: Job, names: Iterable[str], tested: dict[str, str], lock: dict[str, str]) -> str:
    rows = [f"{job.name}: the versions tested, beside the lock"]
    for name in names:
        key = canonicalize_name(name)
        mark = "" if tested.get(key) == lock.get(key) else "   <- not the locked version"
        rows.append(f"  {name:18} {lock.get(key, '-'):>12} -> {tested.get(key, '-'):<12}{mark}")
    return "\n".join(rows)


def run(which: str, work: Path = ROOT / ".run" / "deps") -> int:
    specs = ranges()
    if which == "newest":
        job = Job("newest", requirement_lines(GUARDED, specs), NEWEST_TESTS)
        names: tuple[str, ...] = GUARDED
    else:
        lines = requirement_lines(SIGNATURE_LIBRARIES, specs)
        job = Job("oldest", oldest_pins(lines, work), OLDEST_TESTS)
        names = SIGNATURE_LIBRARIES
    python = build(job, work)
    print(report(job, names, installed(python), locked()), flush=True)
    env_path = f"PYTHONPATH={ROOT}"
    print(f"{env_path} {python} -m pytest -q {' '.join(job.tests)}", flush=True)
    tests = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *job.tests],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    verdict = "PASS" if tests.returncode == 0 else "FAIL"
    print(f"deps {job.name}: {verdict} ({', '.join(job.requirements)})", flush=True)
    return tests.returncode

"""The wheel a user installs: built from this checkout, installed into a clean virtualenv,
imported from outside the repository. One top-level package, the documented surface, and
a writer module of the user's own that runs on it."""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import onceonly

ROOT = Path(__file__).resolve().parents[3]

# Every test here shares one build: with --dist loadgroup, xdist would otherwise run the
# module fixture in each worker, two builds at once.
pytestmark = pytest.mark.xdist_group("wheel")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    bin: Path
    site_packages: Path
    outside: Path  #: a folder outside the repository: the user's project

    def run(self, code: str, **env: str) -> str:
        out = subprocess.run(
            [str(self.python), "-c", code],
            cwd=self.outside,
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.outside), **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info beside pyproject.toml, and
    # two builds in one checkout (a second worker, a developer's own) delete each other's files.
    source = tmp / "source"
    shutil.copytree(
        ROOT / "onceonly", source / "onceonly", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    build = subprocess.run(
        # the build backend from the lock (setuptools, wheel in .venv), not the newest on PyPI
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("-w", str(tmp / "dist"), "."),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("onceonly-*.whl")
    env_dir = tmp / "clean"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies come from the test's own environment, behind the clean one: a path
    # in a .pth file is not a site directory, so that environment's own .pth files (the
    # checkout's editable install among them) are not read
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    outside = tmp / "user-project"
    outside.mkdir()
    yield Installed(wheel, python, env_dir / "bin", Path(purelib), outside)


def test_the_wheel_has_only_onceonly_at_the_top(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        top = {name.split("/")[0] for name in wheel.namelist()}

    assert top == {"onceonly", f"onceonly-{onceonly.__version__}.dist-info"}


def test_the_wheel_ships_neither_the_local_broker_nor_the_fake_servers(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()

    assert not [n for n in names if "devstack" in n or "testkit" in n or "fakes" in n]
    assert "onceonly/testing.py" in names


def test_the_clean_environment_gets_one_top_level_name(installed: Installed) -> None:
    added = {p.name for p in installed.site_packages.iterdir()} - {"deps.pth", "__pycache__"}

    assert added == {"onceonly", f"onceonly-{onceonly.__version__}.dist-info"}


def test_onceonly_is_imported_from_the_clean_environment_with_its_surface(
    installed: Installed,
) -> None:
    out = installed.run(
        "import importlib.util, json, onceonly, sys; "
        "print(json.dumps({'file': onceonly.__file__, 'all': sorted(onceonly.__all__), "
        "'devstack': importlib.util.find_spec('devstack') is not None}))"
    )
    seen = json.loads(out)

    assert Path(seen["file"]).is_relative_to(installed.site_packages)
    assert seen["all"] == sorted(onceonly.__all__)
    assert seen["devstack"] is False


def test_a_writer_module_outside_the_repository_runs_on_the_public_surface(
    installed: Installed,
) -> None:
    (installed.outside / "mywriter.py").write_text(
        textwrap.dedent(
            """
            from onceonly import Burst, Decline

            async def reply(burst: Burst):
                if "unsubscribe" in (burst.latest.text or "").lower():
                    return Decline("unsubscribe request")
                earlier = await burst.history()
                await burst.effects.once("label", {"label": "answered"}, lambda key: key)
                return f"Thanks, {burst.latest.sender}: {len(earlier)} earlier"
            """
        )
    )
    code = textwrap.dedent(
        """
        import asyncio, json
        from onceonly import Decline
        from onceonly.processors.writer.loading import load_writer
        from onceonly.testing import MemoryLedger, call_writer, inbound

        async def main():
            writer = load_writer("mywriter:reply")
            ledger = MemoryLedger()
            text = await call_writer(writer, inbound("hello", sender="ann@x"), ledger=ledger)
            declined = await call_writer(writer, inbound("please UNSUBSCRIBE"))
            return {"text": text, "declined": isinstance(declined, Decline),
                    "effects": len(ledger.records)}

        print(json.dumps(asyncio.run(main())))
        """
    )
    seen = json.loads(installed.run(code).strip().splitlines()[-1])  # after the log lines

    assert seen == {"text": "Thanks, ann@x: 0 earlier", "declined": True, "effects": 1}


def test_the_command_runs_without_the_development_commands(installed: Installed) -> None:
    out = subprocess.run(
        [str(installed.bin / "onceonly"), "--help"],
        cwd=installed.outside,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert out.returncode == 0, out.stderr[-2000:]
    commands = {
        line.split()[0] for line in out.stdout.split("Commands:")[1].splitlines() if line.strip()
    }
    assert {"ingest", "worker", "topics", "replay", "trace"} <= commands
    assert not commands & {"up", "broker", "send"}

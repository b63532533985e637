"""testkit.xdist_groups: a session fixture that tests on both xdist workers ask for starts once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CONFTEST = """
import os
import pytest
from testkit.xdist_groups import GroupByFixture

def pytest_configure(config):
    config.pluginmanager.register(GroupByFixture(("cluster",)), "groups")

@pytest.fixture(scope="session")
def cluster():
    with open(os.environ["STARTS"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    return "started"

@pytest.fixture
def inner(cluster):  # asks for the cluster through another fixture
    return cluster
"""

TESTS = """
import pytest

@pytest.mark.parametrize("n", range(12))
def test_with_cluster(cluster, n):
    assert cluster == "started"

@pytest.mark.parametrize("n", range(12))
def test_without(n):
    pass
"""


@pytest.mark.timeout(120)
def test_a_session_fixture_asked_for_in_two_modules_starts_once_under_two_workers(
    tmp_path: Path,
) -> None:
    # a project like ours: the conftest is in testpaths, so it is registered before xdist's
    # worker plugin, and the mark must still be placed before xdist reads it
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_a.py").write_text(TESTS)
    (tests / "test_b.py").write_text(
        TESTS.replace("(cluster, n)", "(inner, n)").replace("assert cluster", "assert inner")
    )
    starts = tmp_path / "starts.txt"
    env = {**os.environ, "STARTS": str(starts), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "48 passed" in done.stdout, done.stdout
    workers = starts.read_text().split()
    assert workers in (["gw0"], ["gw1"]), f"the session fixture started on {workers}"

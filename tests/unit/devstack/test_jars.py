"""The broker's jars and Kafka's tools, fetched together: against a stand-in ``mvn`` on PATH
that resolves into a local repository of empty files, as Maven's layout has them."""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from devstack.exceptions import BrokerError
from devstack.jars import DEFAULT_POM, kafka_classpath, pom_kafka_version

VERSION = "9.8.7"

POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <properties><kafka.version>{VERSION}</kafka.version></properties>
</project>
"""

#: a stand-in mvn: logs its arguments, writes the broker's classpath where
#: -Dmdep.outputFile says, and "downloads" what -Dartifact names unless told not to
FAKE_MVN = """
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_MVN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
repo = Path(os.environ["FAKE_MVN_REPO"])
props = dict(a[2:].split("=", 1) for a in args if a.startswith("-D") and "=" in a)
version = os.environ["FAKE_MVN_VERSION"]
jars = []
for group, artifact in [("org/apache/kafka", "kafka_2.13"), ("org/apache/kafka", "kafka-clients"),
                        ("org/slf4j", "slf4j-api")]:
    jar = repo / group / artifact / version / f"{artifact}-{version}.jar"
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.touch()
    jars.append(str(jar))
Path(props["mdep.outputFile"]).write_text(os.pathsep.join(jars))
if "artifact" in props and not os.environ.get("FAKE_MVN_NO_GET"):
    group, artifact, got = props["artifact"].split(":")
    jar = repo / group.replace(".", "/") / artifact / got / f"{artifact}-{got}.jar"
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.touch()
"""


@pytest.fixture
def pom(tmp_path: Path) -> Path:
    path = tmp_path / "ops" / "pom.xml"
    path.parent.mkdir()
    path.write_text(POM)
    os.utime(path, (1_000_000_000, 1_000_000_000))  # older than any cache written below
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path / "m2" / "repository"


@pytest.fixture
def mvn_log(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the stand-in mvn first on PATH; the file it logs each run's arguments to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(f"#!{sys.executable}\n{FAKE_MVN}")
    mvn.chmod(0o755)
    log = tmp_path / "mvn.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MVN_LOG", str(log))
    monkeypatch.setenv("FAKE_MVN_REPO", str(repo))
    monkeypatch.setenv("FAKE_MVN_VERSION", VERSION)
    return log


def _runs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _tools_jar(repo: Path, version: str = VERSION) -> Path:
    return repo / "org/apache/kafka/kafka-tools" / version / f"kafka-tools-{version}.jar"


def test_the_tools_are_the_brokers_version_from_the_pom() -> None:
    version = pom_kafka_version(DEFAULT_POM)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    # and the broker's artifact takes that very property
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = ElementTree.parse(DEFAULT_POM).findall("m:dependencies/m:dependency", ns)
    broker = next(d for d in deps if d.findtext("m:artifactId", namespaces=ns) == "kafka_2.13")
    assert broker.findtext("m:version", namespaces=ns) == "${kafka.version}"


def test_a_pom_without_a_kafka_version_is_refused(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text('<project xmlns="http://maven.apache.org/POM/4.0.0"><properties/></project>')
    with pytest.raises(BrokerError, match=re.escape("<kafka.version>")):
        pom_kafka_version(pom)


def test_kafka_tools_are_fetched_in_the_same_maven_run_as_the_brokers_jars(
    tmp_path: Path, pom: Path, repo: Path, mvn_log: Path
) -> None:
    classpath = kafka_classpath(tmp_path / "run", pom=pom)

    entries = classpath.split(os.pathsep)
    assert entries[-1] == str(_tools_jar(repo))
    assert {Path(e).name for e in entries[:-1]} == {
        f"kafka_2.13-{VERSION}.jar",
        f"kafka-clients-{VERSION}.jar",
        f"slf4j-api-{VERSION}.jar",
    }
    assert (tmp_path / "run" / "kafka.classpath").read_text() == classpath
    [run] = _runs(mvn_log)
    assert "dependency:build-classpath" in run and "dependency:get" in run
    # the jar alone: its other dependencies (connect-runtime...) are not wanted
    assert f"-Dartifact=org.apache.kafka:kafka-tools:{VERSION}" in run
    assert "-Dtransitive=false" in run
    assert run[run.index("-f") + 1] == str(pom)


def test_a_current_cache_is_used_without_running_maven(
    tmp_path: Path, pom: Path, mvn_log: Path
) -> None:
    first = kafka_classpath(tmp_path / "run", pom=pom)
    assert kafka_classpath(tmp_path / "run", pom=pom) == first
    assert len(_runs(mvn_log)) == 1


def test_a_classpath_cached_before_the_tools_were_fetched_is_resolved_again(
    tmp_path: Path, pom: Path, repo: Path, mvn_log: Path
) -> None:
    kafka_classpath(tmp_path / "run", pom=pom)
    cached = tmp_path / "run" / "kafka.classpath"
    without_tools = os.pathsep.join(cached.read_text().split(os.pathsep)[:-1])
    cached.write_text(without_tools)  # what an older onceonly left: every jar still there

    classpath = kafka_classpath(tmp_path / "run", pom=pom)

    assert len(_runs(mvn_log)) == 2
    assert classpath.split(os.pathsep)[-1] == str(_tools_jar(repo))
    assert cached.read_text() == classpath


def test_a_tools_jar_gone_from_the_maven_cache_is_fetched_again(
    tmp_path: Path, pom: Path, repo: Path, mvn_log: Path
) -> None:
    kafka_classpath(tmp_path / "run", pom=pom)
    _tools_jar(repo).unlink()

    kafka_classpath(tmp_path / "run", pom=pom)

    assert len(_runs(mvn_log)) == 2 and _tools_jar(repo).is_file()


def test_a_maven_run_that_did_not_fetch_the_tools_fails_and_caches_nothing(
    tmp_path: Path, pom: Path, mvn_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_NO_GET", "1")
    with pytest.raises(BrokerError, match=re.escape(f"kafka-tools-{VERSION}.jar")):
        kafka_classpath(tmp_path / "run", pom=pom)
    assert list((tmp_path / "run").iterdir()) == []  # no cache, no half-written file

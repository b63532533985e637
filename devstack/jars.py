"""The Kafka jars: the official org.apache.kafka:kafka_2.13 artifacts, fetched by Maven
from ops/kafka/pom.xml and kept as a cached classpath, with Kafka's command-line tools
(org.apache.kafka:kafka-tools, the broker's version) beside them."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from devstack.exceptions import OUTPUT_TAIL_LINES as _TAIL_LINES
from devstack.exceptions import BrokerError

#: ``ops/kafka`` in the repository: the pom, the log4j2 config and the server.properties template.
OPS_KAFKA_DIR = Path(__file__).resolve().parent.parent / "ops" / "kafka"


DEFAULT_POM = OPS_KAFKA_DIR / "pom.xml"

#: Kafka's operator tools (``kafka-consumer-groups``, the console consumer, ...). Fetched
#: without its dependencies: the broker's classpath already has every one the tools use
#: (all but connect-runtime, which they do not load).
TOOLS_ARTIFACT = "kafka-tools"

_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_kafka_version(pom: Path = DEFAULT_POM) -> str:
    """The broker's Kafka version: the ``kafka.version`` property of ``pom``."""
    try:
        node = ElementTree.parse(pom).find("m:properties/m:kafka.version", _POM_NS)
    except (OSError, ElementTree.ParseError) as exc:
        raise BrokerError(f"cannot read the Kafka version from {pom}: {exc}") from exc
    if node is None or not (node.text or "").strip():
        raise BrokerError(f"{pom} has no <kafka.version> property: check the pom")
    return (node.text or "").strip()


def tools_jar_name(version: str) -> str:
    return f"{TOOLS_ARTIFACT}-{version}.jar"


def _classpath_is_current(cached: Path, pom: Path, version: str) -> bool:
    try:
        if cached.stat().st_mtime < pom.stat().st_mtime:
            return False
        entries = cached.read_text(encoding="utf-8").strip().split(os.pathsep)
    except OSError:
        return False
    # A classpath cached before the tools were fetched with the broker's jars: resolve again.
    if not any(Path(entry).name == tools_jar_name(version) for entry in entries):
        return False
    # The local Maven cache may have been wiped since: then resolve again.
    return bool(entries) and all(entry and os.path.exists(entry) for entry in entries)


def maven_command(mvn: str, pom: Path, version: str, output: Path) -> list[str]:
    """One Maven run: the pom's classpath into ``output``, and kafka-tools ``version`` (its
    jar alone) into the local Maven repository."""
    return [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={output}",
        "dependency:get",
        f"-Dartifact=org.apache.kafka:{TOOLS_ARTIFACT}:{version}",
        "-Dtransitive=false",
    ]


def with_tools_jar(classpath: str, version: str) -> str:
    """``classpath`` with the kafka-tools jar appended, found in the same local Maven
    repository as its kafka-clients jar (the repository's standard layout)."""
    entries = classpath.split(os.pathsep)
    clients = next(
        (Path(e) for e in entries if Path(e).name == f"kafka-clients-{version}.jar"), None
    )
    if clients is None:
        raise BrokerError(
            f"the resolved classpath has no kafka-clients-{version}.jar: check the pom"
        )
    # <repository>/org/apache/kafka/kafka-clients/<version>/kafka-clients-<version>.jar
    tools = clients.parent.parent.parent / TOOLS_ARTIFACT / version / tools_jar_name(version)
    if not tools.is_file():
        raise BrokerError(
            f"mvn did not fetch {tools}: run python -m devstack broker --fetch-only again"
        )
    if str(tools) in entries:
        return classpath
    return os.pathsep.join([*entries, str(tools)])


def kafka_classpath(run_dir: Path, *, pom: Path = DEFAULT_POM) -> str:
    """The broker's Java classpath, resolved by Maven and cached in ``<run_dir>/kafka.classpath``.

    It also holds Kafka's tools (``kafka-tools``, the broker's version). Maven runs again
    only when ``pom`` is newer than the cached file, or when a jar it lists has gone from
    the local Maven cache. The first run downloads ~50 MB from Maven Central.
    """
    run_dir = Path(run_dir)
    cached = run_dir / "kafka.classpath"
    if not pom.is_file():
        raise BrokerError(
            f"the broker's Maven pom {pom} does not exist: run onceonly from a checkout of "
            "the repository (the pom lives in ops/kafka/)"
        )
    version = pom_kafka_version(pom)
    if _classpath_is_current(cached, pom, version):
        return cached.read_text(encoding="utf-8").strip()

    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "mvn not found on PATH: the embedded Kafka broker's jars are resolved with "
            "Maven; install Maven 3.8 or newer (apt-get install maven)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    # Write beside the cache and rename, so concurrent starts never read half a file.
    partial = run_dir / f".kafka.classpath.{os.getpid()}.{threading.get_ident()}"
    try:
        _run_maven(maven_command(mvn, pom, version, partial), pom, partial)
        classpath = partial.read_text(encoding="utf-8").strip()
        if not classpath:
            raise BrokerError(f"mvn resolved an empty classpath from {pom}: check the pom")
        classpath = with_tools_jar(classpath, version)
        partial.write_text(classpath, encoding="utf-8")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, cached)
    return classpath


def _run_maven(command: list[str], pom: Path, output: Path) -> None:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(
            f"mvn took over 10 minutes to resolve the Kafka jars from {pom}: check the "
            "network connection to Maven Central, then start again"
        ) from exc
    output_text = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or not output.is_file():
        detail = "\n".join(output_text.splitlines()[-_TAIL_LINES:])
        raise BrokerError(
            f"mvn failed (exit {result.returncode}) resolving the Kafka jars from {pom}; "
            f"fix the cause below (network to Maven Central? ~/.m2 writable?) and start "
            f"again:\n{detail}"
        )

"""The Kafka jars: the official org.apache.kafka:kafka_2.13 artifacts, fetched by Maven
from ops/kafka/pom.xml and kept as a cached classpath."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from devstack.exceptions import OUTPUT_TAIL_LINES as _TAIL_LINES
from devstack.exceptions import BrokerError

#: ``ops/kafka`` in the repository: the pom, the log4j2 config and the server.properties template.
OPS_KAFKA_DIR = Path(__file__).resolve().parent.parent / "ops" / "kafka"


DEFAULT_POM = OPS_KAFKA_DIR / "pom.xml"


def _classpath_is_current(cached: Path, pom: Path) -> bool:
    try:
        if cached.stat().st_mtime < pom.stat().st_mtime:
            return False
        entries = cached.read_text(encoding="utf-8").strip().split(os.pathsep)
    except OSError:
        return False
    # The local Maven cache may have been wiped since: then resolve again.
    return bool(entries) and all(entry and os.path.exists(entry) for entry in entries)


def kafka_classpath(run_dir: Path, *, pom: Path = DEFAULT_POM) -> str:
    """The broker's Java classpath, resolved by Maven and cached in ``<run_dir>/kafka.classpath``.

    Maven runs again only when ``pom`` is newer than the cached file, or when a jar it lists
    has gone from the local Maven cache. The first run downloads ~50 MB from Maven Central.
    """
    run_dir = Path(run_dir)
    cached = run_dir / "kafka.classpath"
    if not pom.is_file():
        raise BrokerError(
            f"the broker's Maven pom {pom} does not exist: run onceonly from a checkout of "
            "the repository (the pom lives in ops/kafka/)"
        )
    if _classpath_is_current(cached, pom):
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
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={partial}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        partial.unlink(missing_ok=True)
        raise BrokerError(
            f"mvn took over 10 minutes to resolve the Kafka jars from {pom}: check the "
            "network connection to Maven Central, then start again"
        ) from exc
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        detail = "\n".join(output.splitlines()[-_TAIL_LINES:])
        raise BrokerError(
            f"mvn failed (exit {result.returncode}) resolving the Kafka jars from {pom}; "
            f"fix the cause below (network to Maven Central? ~/.m2 writable?) and start "
            f"again:\n{detail}"
        )
    classpath = partial.read_text(encoding="utf-8").strip()
    if not classpath:
        partial.unlink(missing_ok=True)
        raise BrokerError(f"mvn resolved an empty classpath from {pom}: check the pom")
    os.replace(partial, cached)
    return classpath

"""The JVM under the dev broker: finding java, a new cluster id, its output pumped to a
tail, and what a failed start means."""

from __future__ import annotations

import base64
import collections
import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import IO

from devstack.exceptions import OUTPUT_TAIL_LINES as _TAIL_LINES
from devstack.exceptions import BrokerError


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java not found on PATH (nor as $JAVA_HOME/bin/java): the embedded Kafka broker "
            "needs Java 17 or newer; install OpenJDK 17 (apt-get install openjdk-17-jre-headless)"
        )
    return found


def tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def kafka_jvm(pid_path: Path, directory: Path) -> int | None:
    """The pid ``pid_path`` holds if that process is a Kafka broker's JVM run from
    ``directory`` (its command line names it), else None."""
    try:
        pid = int(pid_path.read_text(encoding="ascii").strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if b"kafka.Kafka" in cmdline and str(directory).encode() in cmdline:
        return pid
    return None


def new_cluster_id() -> str:
    """A Kafka ``Uuid`` string (22 url-safe base64 characters), as ``kafka-storage random-uuid``."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


def pump_output(
    stream: IO[bytes], tail: collections.deque[str], console: Path | None = None
) -> None:
    """Echo the JVM's console (WARN and above, JVM errors) to our stderr, or append it to
    ``console`` if given, and keep its tail."""
    out = console.open("ab") if console is not None else None
    try:
        for raw in iter(stream.readline, b""):
            tail.append(raw.decode("utf-8", "replace").rstrip())
            with contextlib.suppress(OSError):
                if out is not None:
                    out.write(raw)
                    out.flush()
                else:  # straight to fd 2: sys.stderr may be swapped (e.g. by pytest)
                    os.write(2, raw)
    finally:
        if out is not None:
            out.close()


def start_failure_hint(output: str, data_dir: Path) -> str:
    """What a broker's start-up output means, and what to do about it ("" if unknown)."""
    if "UnsupportedClassVersionError" in output:
        return " Kafka 4 needs Java 17 or newer: install OpenJDK 17 and put it on PATH."
    if "Address already in use" in output:
        return " A port is taken: stop the other process or choose other ports."
    if "doesn't match previous" in output or "Invalid cluster.id" in output:
        return (
            f" {data_dir} holds another cluster's or node's data: delete it to "
            "start afresh, or point this broker at its own run dir."
        )
    if "Failed to acquire lock" in output:
        return f" Another broker uses {data_dir}: stop it or choose another run dir."
    return ""


def java_options(heap_mb: int, log4j2_config: Path, logs_dir: Path) -> list[str]:
    """A light JVM: the serial collector and the C1 compiler only start faster and use
    ~30 MB less memory than G1 and C2; a webhook broker is never CPU-bound."""
    return [
        f"-Xmx{heap_mb}m",
        f"-Xms{min(64, heap_mb)}m",
        "-Xss512k",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:MaxDirectMemorySize=128m",
        "-XX:MaxMetaspaceSize=128m",
        "-XX:ReservedCodeCacheSize=64m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j2_config}",
        f"-Donceonly.broker.logs.dir={logs_dir}",
    ]


MAX_HEAP_MB = 512
MIN_HEAP_MB = 128


def check_arguments(heap_mb: int, port: int, controller_port: int | None) -> None:
    """Refuse a heap out of range, a port that is not a TCP port, or one port for two roles."""
    if not MIN_HEAP_MB <= heap_mb <= MAX_HEAP_MB:
        raise BrokerError(
            f"broker heap of {heap_mb} MB is out of range: choose {MIN_HEAP_MB} to "
            f"{MAX_HEAP_MB} MB (ONCEONLY_BROKER_HEAP_MB)"
        )
    if not 0 < port < 65536:
        raise BrokerError(f"broker port {port} is not a TCP port: choose 1 to 65535")
    if controller_port is not None and not 0 < controller_port < 65536:
        raise BrokerError(f"controller port {controller_port} is not a TCP port: choose 1 to 65535")
    if controller_port == port:
        raise BrokerError(
            f"the broker and its controller cannot share port {port}: choose two ports"
        )

"""A single-node Apache Kafka 4.1 broker (KRaft, broker + controller) that we run ourselves.

No Docker: the broker's jars come from Maven Central through ``ops/kafka/pom.xml`` and stay
in the local Maven cache; the JVM runs ``kafka.Kafka`` as a child process in its own process
group. Everything an instance owns lives under ``<run_dir>/broker/``::

    server.properties   written on every start from ops/kafka/server.properties.template
    data/               log.dirs: formatted on the first start only, reused afterwards
    logs/server.log     the broker's log (ops/kafka/log4j2.properties)
    broker.pid          the running JVM's pid

so several brokers can run side by side from distinct run directories on distinct ports.
The resolved classpath is cached in ``<run_dir>/kafka.classpath``.
"""

from __future__ import annotations

import atexit
import base64
import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from string import Template
from types import TracebackType
from typing import IO

from foundation.errors import OnceOnlyError
from foundation.kafka import Admin, BrokerUnavailable
from foundation.settings import DEFAULT_BROKER_HEAP_MB, DEFAULT_KAFKA_PORT

__all__ = [
    "DEFAULT_POM",
    "BrokerError",
    "EmbeddedBroker",
    "free_port",
    "kafka_classpath",
    "run_foreground",
]

#: ``ops/kafka`` in the repository: the pom, the log4j2 config and the server.properties template.
OPS_KAFKA_DIR = Path(__file__).resolve().parent.parent / "ops" / "kafka"
DEFAULT_POM = OPS_KAFKA_DIR / "pom.xml"
LOG4J2_CONFIG = OPS_KAFKA_DIR / "log4j2.properties"
SERVER_PROPERTIES_TEMPLATE = OPS_KAFKA_DIR / "server.properties.template"

MAX_HEAP_MB = 512
MIN_HEAP_MB = 128
_LOOPBACK = "127.0.0.1"
_NODE_ID = 1
_TAIL_LINES = 25


class BrokerError(OnceOnlyError):
    """The embedded Kafka broker could not be set up, started or stopped."""


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    """Whether Kafka could bind ``127.0.0.1:port`` (it sets SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_LOOPBACK, port))
        except OSError:
            return False
        return True


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((_LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _find_java() -> str:
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


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _new_cluster_id() -> str:
    """A Kafka ``Uuid`` string (22 url-safe base64 characters), as ``kafka-storage random-uuid``."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


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


# --------------------------------------------------------------------------- the broker

_running: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()


@atexit.register
def _stop_leftover_brokers() -> None:
    """Never leave a JVM behind when the interpreter exits without calling ``stop()``."""
    for broker in list(_running):
        with contextlib.suppress(Exception):
            broker.stop(timeout_s=10.0)


class EmbeddedBroker:
    """One single-node Kafka broker whose files live under ``<run_dir>/broker/``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with EmbeddedBroker(tmp_path, port=free_port()) as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap})
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        port: int = DEFAULT_KAFKA_PORT,
        controller_port: int | None = None,
        heap_mb: int = DEFAULT_BROKER_HEAP_MB,
        startup_timeout_s: float = 90.0,
    ) -> None:
        if not MIN_HEAP_MB <= heap_mb <= MAX_HEAP_MB:
            raise BrokerError(
                f"broker heap of {heap_mb} MB is out of range: choose {MIN_HEAP_MB} to "
                f"{MAX_HEAP_MB} MB (ONCEONLY_BROKER_HEAP_MB)"
            )
        if not 0 < port < 65536:
            raise BrokerError(f"broker port {port} is not a TCP port: choose 1 to 65535")
        if controller_port is not None and not 0 < controller_port < 65536:
            raise BrokerError(
                f"controller port {controller_port} is not a TCP port: choose 1 to 65535"
            )
        if controller_port == port:
            raise BrokerError(
                f"the broker and its controller cannot share port {port}: choose two ports"
            )
        self.run_dir = Path(run_dir).resolve()
        self.port = port
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self._requested_controller_port = controller_port
        self._controller_port: int | None = controller_port
        self._process: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._lock = threading.Lock()

    # ---- paths ----------------------------------------------------------------------

    @property
    def broker_dir(self) -> Path:
        return self.run_dir / "broker"

    @property
    def data_dir(self) -> Path:
        return self.broker_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.broker_dir / "logs"

    @property
    def log_path(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def properties_path(self) -> Path:
        return self.broker_dir / "server.properties"

    @property
    def pid_path(self) -> Path:
        return self.broker_dir / "broker.pid"

    @property
    def bootstrap(self) -> str:
        return f"{_LOOPBACK}:{self.port}"

    @property
    def controller_port(self) -> int | None:
        """The controller listener's port: chosen at :meth:`start` unless given."""
        return self._controller_port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ---- life cycle -------------------------------------------------------------------

    def start(self) -> str:
        """Start the broker (formatting its storage on the first start) and wait until it
        answers a metadata request; return the bootstrap address. Idempotent."""
        with self._lock:
            if self.is_running():
                return self.bootstrap
            self._reap()  # a broker that died on its own since the last start
            started = time.monotonic()
            java = _find_java()
            self._refuse_second_instance()
            controller_port = self._requested_controller_port or self._pick_controller_port()
            self._check_port(self.port, "broker")
            self._check_port(controller_port, "controller")
            self._controller_port = controller_port
            classpath = kafka_classpath(self.run_dir)
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._write_properties(controller_port)
            if not (self.data_dir / "meta.properties").is_file():
                self._format_storage(java, classpath)
            self._launch(java, classpath)
            try:
                self._wait_until_ready(deadline=started + self.startup_timeout_s)
            except BaseException:
                self._terminate(timeout_s=10.0)
                raise
            _running.add(self)
            return self.bootstrap

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut the broker down cleanly (SIGTERM), or SIGKILL it after ``timeout_s``.

        Idempotent: stopping a stopped broker does nothing."""
        with self._lock:
            self._terminate(timeout_s=timeout_s)

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would (for failure tests). Idempotent."""
        with self._lock:
            process = self._process
            if process is not None and process.poll() is None:
                self._signal(process, signal.SIGKILL)
                process.wait()
            self._reap()

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"EmbeddedBroker({self.bootstrap}, {self.broker_dir}, {state})"

    # ---- start-up steps ------------------------------------------------------------------

    def _pick_controller_port(self) -> int:
        port = free_port()
        while port == self.port:
            port = free_port()
        return port

    def _check_port(self, port: int, role: str) -> None:
        if not _port_is_free(port):
            raise BrokerError(
                f"cannot start the Kafka broker: {role} port {_LOOPBACK}:{port} is already "
                "in use (another broker or program listens there); stop that process or "
                "choose another port" + (" (ONCEONLY_KAFKA_BOOTSTRAP)" if role == "broker" else "")
            )

    def _refuse_second_instance(self) -> None:
        """Two JVMs on one data directory: the second would die on Kafka's lock file."""
        try:
            pid = int(self.pid_path.read_text(encoding="ascii").strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"kafka.Kafka" in cmdline and str(self.broker_dir).encode() in cmdline:
            raise BrokerError(
                f"a Kafka broker (pid {pid}) is already running from {self.broker_dir}: "
                f"use it, stop it (kill {pid}), or give this one another run directory"
            )

    def _write_properties(self, controller_port: int) -> None:
        try:
            template = Template(SERVER_PROPERTIES_TEMPLATE.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BrokerError(
                f"cannot read the broker's configuration template "
                f"{SERVER_PROPERTIES_TEMPLATE}: {exc}; run onceonly from a checkout of the "
                "repository"
            ) from exc
        text = template.substitute(
            port=self.port,
            controller_port=controller_port,
            # java.util.Properties treats a backslash as an escape.
            data_dir=str(self.data_dir).replace("\\", "\\\\"),
        )
        self.properties_path.write_text(text, encoding="utf-8")

    def _java_options(self) -> list[str]:
        # A light JVM: the serial collector and the C1 compiler only start faster and use
        # ~30 MB less memory than G1 and C2; a webhook broker is never CPU-bound.
        return [
            f"-Xmx{self.heap_mb}m",
            f"-Xms{min(64, self.heap_mb)}m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:MaxDirectMemorySize=128m",
            "-XX:MaxMetaspaceSize=128m",
            "-XX:ReservedCodeCacheSize=64m",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Donceonly.broker.logs.dir={self.logs_dir}",
        ]

    def _format_storage(self, java: str, classpath: str) -> None:
        command = [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Donceonly.broker.logs.dir={self.logs_dir}",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(self.properties_path),
            "--cluster-id",
            _new_cluster_id(),
            "--ignore-formatted",
        ]
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=120, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"formatting the broker's storage in {self.data_dir} took over 120 s: "
                "check that the disk is writable and not full, then start again"
            ) from exc
        if result.returncode != 0:
            detail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-_TAIL_LINES:])
            raise BrokerError(
                f"formatting the broker's storage in {self.data_dir} failed "
                f"(kafka-storage exit {result.returncode}); fix the cause below, or delete "
                f"{self.data_dir} to start afresh:\n{detail}"
            )

    def _launch(self, java: str, classpath: str) -> None:
        command = [
            java,
            *self._java_options(),
            "-cp",
            classpath,
            "kafka.Kafka",
            str(self.properties_path),
        ]
        self._stderr_tail.clear()
        # Own session and process group: a Ctrl-C in the terminal reaches us, not the JVM,
        # and we decide how the broker stops.
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.broker_dir,
            start_new_session=True,
        )
        self.pid_path.write_text(f"{self._process.pid}\n", encoding="ascii")
        assert self._process.stdout is not None
        self._pump = threading.Thread(
            target=_pump_output,
            args=(self._process.stdout, self._stderr_tail),
            name=f"kafka-broker-{self.port}-output",
            daemon=True,
        )
        self._pump.start()

    def _wait_until_ready(self, deadline: float) -> None:
        process = self._process
        assert process is not None
        while True:
            code = process.poll()
            if code is not None:
                self._reap()
                raise BrokerError(self._early_exit_message(code))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"the Kafka broker at {self.bootstrap} did not answer a metadata request "
                    f"within {self.startup_timeout_s:g} s; see {self.log_path}"
                )
            if _accepts_connections(self.port) and self._answers_metadata(min(remaining, 5.0)):
                return
            time.sleep(0.2)

    def _answers_metadata(self, timeout_s: float) -> bool:
        admin = Admin(
            self.bootstrap,
            **{
                "socket.connection.setup.timeout.ms": 2000,
                "log_level": 2,  # only critical librdkafka messages while the broker boots
            },
        )
        try:
            return _NODE_ID in admin.broker_ids(max(timeout_s, 0.5))
        except BrokerUnavailable:
            return False

    def _early_exit_message(self, code: int) -> str:
        output = "\n".join(self._stderr_tail) or _tail(self.log_path)
        hint = ""
        if "UnsupportedClassVersionError" in output:
            hint = " Kafka 4 needs Java 17 or newer: install OpenJDK 17 and put it on PATH."
        elif "Address already in use" in output:
            hint = " A port is taken: stop the other process or choose other ports."
        elif "doesn't match previous" in output or "Invalid cluster.id" in output:
            hint = (
                f" {self.data_dir} holds another cluster's or node's data: delete it to "
                "start afresh, or point this broker at its own run dir."
            )
        elif "Failed to acquire lock" in output:
            hint = f" Another broker uses {self.data_dir}: stop it or choose another run dir."
        return (
            f"the Kafka broker exited during start-up (exit code {code}); see {self.log_path}."
            f"{hint}\n{output}"
        )

    # ---- shutdown -----------------------------------------------------------------------

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)  # the JVM leads its own process group

    def _terminate(self, timeout_s: float) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            self._signal(process, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(process, signal.SIGKILL)
                process.wait()
        self._reap()

    def _reap(self) -> None:
        if self._pump is not None:
            self._pump.join(timeout=5.0)
            self._pump = None
        if self._process is not None:
            if self._process.stdout is not None:
                self._process.stdout.close()
            with contextlib.suppress(OSError, ValueError):
                if int(self.pid_path.read_text(encoding="ascii")) == self._process.pid:
                    self.pid_path.unlink()
        self._process = None
        _running.discard(self)


def _pump_output(stream: IO[bytes], tail: collections.deque[str]) -> None:
    """Echo the JVM's console (WARN and above, JVM errors) to our stderr and keep its tail."""
    for raw in iter(stream.readline, b""):
        tail.append(raw.decode("utf-8", "replace").rstrip())
        # Straight to fd 2: sys.stderr may be swapped (e.g. by pytest) while we run.
        with contextlib.suppress(OSError):
            os.write(2, raw)


# --------------------------------------------------------------------------- CLI entry


def run_foreground(run_dir: Path, port: int, heap_mb: int) -> int:
    """``onceonly broker``: run a broker until SIGINT or SIGTERM, then stop it cleanly.

    Returns 0 after a requested stop, 1 if the broker died on its own."""
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {
        signum: signal.signal(signum, _request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    broker = EmbeddedBroker(run_dir, port=port, heap_mb=heap_mb)
    try:
        bootstrap = broker.start()
        print(f"kafka broker ready at {bootstrap}", flush=True)
        while not stop_requested.wait(timeout=1.0):
            if not broker.is_running():
                print(
                    f"kafka broker at {bootstrap} exited on its own; see {broker.log_path}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
        print("stopping kafka broker...", file=sys.stderr, flush=True)
        return 0
    finally:
        broker.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

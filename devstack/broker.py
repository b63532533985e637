"""A single-node Apache Kafka 4.1 broker (KRaft, broker + controller) that we run ourselves.

No Docker: the jars come from Maven Central through ``ops/kafka/pom.xml`` (``devstack.jars``);
the JVM runs ``kafka.Kafka`` as a child in its own process group. An instance owns
``<run_dir>/broker/``: ``server.properties`` (written on every start from the template),
``data/`` (formatted on the first start only), ``logs/server.log`` and ``broker.pid``; so
several brokers can run side by side from distinct run directories on distinct ports.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
import weakref
from pathlib import Path
from string import Template
from typing import Any

from devstack.children import Running
from devstack.exceptions import OUTPUT_TAIL_LINES as _TAIL_LINES
from devstack.exceptions import BrokerError
from devstack.jars import OPS_KAFKA_DIR, kafka_classpath
from devstack.jvm import (
    check_arguments,
    find_java,
    java_options,
    kafka_jvm,
    new_cluster_id,
    pump_output,
    start_failure_hint,
    tail,
)
from devstack.ports import LOOPBACK as _LOOPBACK
from devstack.ports import accepts_connections, free_port, port_is_free
from onceonly.foundation.kafka import Admin, BrokerUnavailable, Connection
from onceonly.foundation.settings import DEFAULT_BROKER_HEAP_MB, DEFAULT_KAFKA_PORT

LOG4J2_CONFIG = OPS_KAFKA_DIR / "log4j2.properties"
SERVER_PROPERTIES_TEMPLATE = OPS_KAFKA_DIR / "server.properties.template"


# --------------------------------------------------------------------------- the broker

_running: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()


@atexit.register
def _stop_leftover_brokers() -> None:
    """Never leave a JVM behind when the interpreter exits without calling ``stop()``."""
    for broker in list(_running):
        with contextlib.suppress(Exception):
            broker.stop(timeout_s=10.0)


class EmbeddedBroker(Running):
    """One single-node Kafka broker whose files live under ``<run_dir>/broker/``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with EmbeddedBroker(tmp_path, port=free_port()) as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap})

    A node of a local cluster (:mod:`devstack.cluster`) is a subclass that overrides the
    class attributes and the ``_template_values`` / ``_cluster_id`` hooks.
    """

    node_id = 1
    dir_name = "broker"
    template_path = SERVER_PROPERTIES_TEMPLATE

    def __init__(
        self,
        run_dir: Path,
        *,
        port: int = DEFAULT_KAFKA_PORT,
        controller_port: int | None = None,
        heap_mb: int = DEFAULT_BROKER_HEAP_MB,
        startup_timeout_s: float = 90.0,
        quiet: bool = False,
    ) -> None:
        check_arguments(heap_mb, port, controller_port)
        self.run_dir = Path(run_dir).resolve()
        self.port = port
        self.quiet = quiet  #: the JVM's console to <logs>/console.log, not our stderr
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
        return self.run_dir / self.dir_name

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
            java = find_java()
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
        if not port_is_free(port):
            raise BrokerError(
                f"cannot start the Kafka broker: {role} port {_LOOPBACK}:{port} is already "
                "in use (another broker or program listens there); stop that process or "
                "choose another port" + (" (ONCEONLY_KAFKA_BOOTSTRAP)" if role == "broker" else "")
            )

    def _refuse_second_instance(self) -> None:
        """Two JVMs on one data directory: the second would die on Kafka's lock file."""
        pid = kafka_jvm(self.pid_path, self.broker_dir)
        if pid is not None:
            raise BrokerError(
                f"a Kafka broker (pid {pid}) is already running from {self.broker_dir}: "
                f"use it, stop it (kill {pid}), or give this one another run directory"
            )

    def _write_properties(self, controller_port: int) -> None:
        try:
            template = Template(self.template_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BrokerError(
                f"cannot read the broker's configuration template "
                f"{self.template_path}: {exc}; run onceonly from a checkout of the "
                "repository"
            ) from exc
        text = template.substitute(self._template_values(controller_port))
        self.properties_path.write_text(text, encoding="utf-8")

    def _template_values(self, controller_port: int) -> dict[str, object]:
        return {
            "port": self.port,
            "controller_port": controller_port,
            # java.util.Properties treats a backslash as an escape.
            "data_dir": str(self.data_dir).replace("\\", "\\\\"),
        }

    def _cluster_id(self) -> str:
        return new_cluster_id()

    def _format_options(self) -> list[str]:
        """Extra ``kafka-storage format`` arguments (a cluster node adds SCRAM users)."""
        return []

    def _java_options(self) -> list[str]:
        return java_options(self.heap_mb, LOG4J2_CONFIG, self.logs_dir)

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
            self._cluster_id(),
            "--ignore-formatted",
            *self._format_options(),
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
        console = self.logs_dir / "console.log" if self.quiet else None
        self._pump = threading.Thread(
            target=pump_output,
            args=(self._process.stdout, self._stderr_tail, console),
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
            if accepts_connections(self.port) and self._answers_metadata(min(remaining, 5.0)):
                return
            time.sleep(0.2)

    def _answers_metadata(self, timeout_s: float) -> bool:
        config: dict[str, Any] = {
            "socket.connection.setup.timeout.ms": 2000,
            "log_level": 2,  # only critical librdkafka messages while the broker boots
        }
        admin = Admin(self.connection(), **config)
        try:
            return self.node_id in admin.broker_ids(max(timeout_s, 0.5))
        except BrokerUnavailable:
            return False

    def connection(self) -> Connection:
        """How a client reaches this broker (SASL on a cluster node of a SASL cluster)."""
        return Connection(self.bootstrap)

    def _early_exit_message(self, code: int) -> str:
        output = "\n".join(self._stderr_tail) or tail(self.log_path)
        return (
            f"the Kafka broker exited during start-up (exit code {code}); see {self.log_path}."
            f"{start_failure_hint(output, self.data_dir)}\n{output}"
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

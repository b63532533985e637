"""A local Kafka cluster: N combined broker + controller nodes (KRaft), one JVM each.

Node ``n`` (1-based) owns ``<run_dir>/broker-<n>/`` and listens for clients on the
bootstrap port + n - 1, for the quorum on a controller port of its own; every node is
formatted once with the one cluster id kept in ``<run_dir>/cluster.id``. The nodes start
together (a quorum forms only once a majority of controllers is up) and stop together;
one node can be killed and restarted alone, as the failure tests do. Under
``python -m devstack broker --nodes N``, :class:`devstack.up.ClusterSupervisor` reports a node that
died and restarts it on its data while the others keep serving.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from devstack.broker import EmbeddedBroker
from devstack.children import Running
from devstack.exceptions import BrokerError
from devstack.jars import OPS_KAFKA_DIR
from devstack.jvm import new_cluster_id
from devstack.ports import LOOPBACK, free_port
from onceonly.foundation.kafka import Connection
from onceonly.foundation.settings import Settings

CLUSTER_TEMPLATE = OPS_KAFKA_DIR / "server-cluster.properties.template"
#: each node's heap at most: three JVMs share a small machine
CLUSTER_HEAP_MB = 384
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_TEXT = re.compile(r'^[^"\\\s,\[\]=]+$')


@dataclass(frozen=True)
class ScramUser:
    """The one SCRAM user of a ``--sasl`` cluster: clients and the brokers themselves."""

    username: str
    password: str
    mechanism: str = "SCRAM-SHA-256"

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_MECHANISMS:
            raise BrokerError(
                f"the local cluster speaks {' and '.join(SCRAM_MECHANISMS)}, not "
                f"{self.mechanism}: set ONCEONLY_KAFKA_SASL_MECHANISM to one of them"
            )
        for what, value in (("user name", self.username), ("password", self.password)):
            if not _PLAIN_TEXT.match(value):
                raise BrokerError(
                    f"the SCRAM {what} for the local cluster must be non-empty, without "
                    'spaces, quotes, backslashes, commas, brackets or "="'
                )

    def client_config(self) -> dict[str, str]:
        """librdkafka's settings for this user on the cluster's SASL_PLAINTEXT listener."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }


def scram_user(settings: Settings) -> ScramUser:
    """The cluster's SCRAM user from ONCEONLY_KAFKA_SASL_USERNAME / _PASSWORD / _MECHANISM."""
    password = settings.kafka_sasl_password
    if not settings.kafka_sasl_username or password is None:
        raise BrokerError(
            "--sasl creates the SCRAM user ONCEONLY_KAFKA_SASL_USERNAME with the password "
            "ONCEONLY_KAFKA_SASL_PASSWORD: set both"
        )
    return ScramUser(
        settings.kafka_sasl_username, password.get_secret_value(), settings.kafka_sasl_mechanism
    )


def voters(controller_ports: list[int]) -> str:
    """``controller.quorum.voters``: node ids 1..N on their controller ports."""
    return ",".join(f"{n}@{LOOPBACK}:{port}" for n, port in enumerate(controller_ports, 1))


def sasl_properties(user: ScramUser | None) -> str:
    """The server.properties lines of a SCRAM listener (empty without one)."""
    if user is None:
        return ""
    login = f'{_SCRAM_LOGIN} required username="{user.username}" password="{user.password}";'
    lines = [
        f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        f"sasl.mechanism.inter.broker.protocol={user.mechanism}",
        *(
            f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config={login}"
            for m in SCRAM_MECHANISMS
        ),
    ]
    return "\n".join(lines)


class ClusterNode(EmbeddedBroker):
    """One node of a :class:`LocalCluster`, in ``<run_dir>/broker-<node_id>/``."""

    template_path = CLUSTER_TEMPLATE

    def __init__(
        self,
        run_dir: Path,
        *,
        node_id: int,
        port: int,
        controller_ports: list[int],
        cluster_id: str,
        heap_mb: int,
        user: ScramUser | None,
        startup_timeout_s: float,
        quiet: bool = False,
    ) -> None:
        super().__init__(
            run_dir,
            port=port,
            controller_port=controller_ports[node_id - 1],
            heap_mb=heap_mb,
            startup_timeout_s=startup_timeout_s,
            quiet=quiet,
        )
        self.node_id = node_id
        self.dir_name = f"broker-{node_id}"
        self._voters = voters(controller_ports)
        self._cluster = cluster_id
        self.user = user

    def _template_values(self, controller_port: int) -> dict[str, object]:
        return {
            **super()._template_values(controller_port),
            "node_id": self.node_id,
            "voters": self._voters,
            "protocol": "PLAINTEXT" if self.user is None else "SASL_PLAINTEXT",
            "sasl": sasl_properties(self.user),
        }

    def _cluster_id(self) -> str:
        return self._cluster

    def _format_options(self) -> list[str]:
        user = self.user
        if user is None:
            return []
        credential = f'[name="{user.username}",password="{user.password}"]'
        return [arg for m in SCRAM_MECHANISMS for arg in ("--add-scram", f"{m}={credential}")]

    def connection(self) -> Connection:
        return Connection(self.bootstrap, {} if self.user is None else self.user.client_config())

    @property
    def exit_code(self) -> int | None:
        """How the node's last JVM ended (negative: the signal that killed it), until the
        next start; None while it runs or if none was started."""
        process = self._process
        return None if process is None else process.poll()

    def stop(self, timeout_s: float = 30.0) -> None:
        """As :meth:`EmbeddedBroker.stop`; a start under way in another thread (a restart
        by the supervisor) is ended first: its JVM gets SIGTERM, so that start fails at once
        instead of holding the node until it answers."""
        process = self._process
        if self._lock.locked() and process is not None and process.poll() is None:
            self._signal(process, signal.SIGTERM)
        super().stop(timeout_s)


def cluster_id(run_dir: Path) -> str:
    """The cluster's id: made on the first start, kept in ``<run_dir>/cluster.id``."""
    path = run_dir / "cluster.id"
    with contextlib.suppress(OSError):
        existing = path.read_text(encoding="ascii").strip()
        if existing:
            return existing
    run_dir.mkdir(parents=True, exist_ok=True)
    made = new_cluster_id()
    path.write_text(f"{made}\n", encoding="ascii")
    return made


class LocalCluster(Running):
    """``nodes`` Kafka nodes on the bootstrap port and the ports after it; see the module."""

    def __init__(
        self,
        run_dir: Path,
        *,
        port: int,
        nodes: int = 3,
        heap_mb: int = CLUSTER_HEAP_MB,
        user: ScramUser | None = None,
        startup_timeout_s: float = 120.0,
        quiet: bool = False,
    ) -> None:
        """``quiet``: each node's console (WARN and above) goes to its
        ``logs/console.log`` instead of our stderr (a supervisor with output of its own)."""
        if nodes < 2:
            raise BrokerError(f"a cluster has 2 nodes or more, not {nodes}: use EmbeddedBroker")
        if port + nodes - 1 > 65535:
            raise BrokerError(f"ports {port}..{port + nodes - 1} do not all exist: choose a lower")
        self.run_dir = Path(run_dir).resolve()
        self.user = user
        ports = [port + n for n in range(nodes)]
        controllers = _free_ports(nodes, avoid=set(ports))
        the_id = cluster_id(self.run_dir)
        self.nodes = [
            ClusterNode(
                self.run_dir,
                node_id=n,
                port=ports[n - 1],
                controller_ports=controllers,
                cluster_id=the_id,
                heap_mb=heap_mb,
                user=user,
                startup_timeout_s=startup_timeout_s,
                quiet=quiet,
            )
            for n in range(1, nodes + 1)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "broker-*" / "logs" / "server.log"

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id - 1]

    def connection(self) -> Connection:
        """How a client reaches the cluster: every node's address, SASL with its user."""
        return Connection(self.bootstrap, {} if self.user is None else self.user.client_config())

    def is_running(self) -> bool:
        return all(node.is_running() for node in self.nodes)

    def start(self) -> str:
        """Start every node at once; return the bootstrap list once each one answers."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            futures = [pool.submit(node.start) for node in self.nodes]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            self.stop()
            raise failed[0]
        return self.bootstrap

    def stop(self, timeout_s: float = 30.0) -> None:
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.stop(timeout_s), self.nodes))

    def kill(self) -> None:
        """SIGKILL every node (a throwaway cluster's end: nothing of it is kept)."""
        for node in self.nodes:
            node.kill()


def _free_ports(count: int, *, avoid: set[int]) -> list[int]:
    chosen: list[int] = []
    while len(chosen) < count:
        port = free_port()
        if port not in avoid and port not in chosen:
            chosen.append(port)
    return chosen

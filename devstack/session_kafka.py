"""Which Kafka broker a test session runs on, and the record of the one it took.

The session fixture (``kafka_bootstrap`` in tests/conftest.py) takes one of three paths:

- ``external``: ``ONCEONLY_KAFKA_BOOTSTRAP`` is set; that broker is used as it is;
- ``testcontainers``: a KRaft container of ``ONCEONLY_TEST_KAFKA_IMAGE`` (apache/kafka:4.1.1
  unless set) started by testcontainers on the Docker engine ``DOCKER_HOST`` names
  (devstack.tc_kafka);
- ``embedded``: onceonly's own broker from the Maven jars (devstack.broker).

``ONCEONLY_TEST_KAFKA`` chooses: ``testcontainers`` or ``embedded`` force that path, and a
forced path that cannot be taken fails the session instead of falling back to another;
unset (or ``auto``), a Docker engine that answers gets testcontainers, else the embedded
broker. The path taken is shown at the end of the session (``kafka: ...``) and, when
``ONCEONLY_TEST_KAFKA_RECORD`` names a file, written there as JSON for the caller to check
(``make test-testcontainers`` does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from devstack.jars import OPS_KAFKA_DIR

CHOICE_ENV = "ONCEONLY_TEST_KAFKA"
IMAGE_ENV = "ONCEONLY_TEST_KAFKA_IMAGE"
RECORD_ENV = "ONCEONLY_TEST_KAFKA_RECORD"
EXTERNAL_ENV = "ONCEONLY_KAFKA_BOOTSTRAP"
DEFAULT_IMAGE = "apache/kafka:4.1.1"

KafkaPath = Literal["external", "testcontainers", "embedded"]
CHOICES = ("auto", "testcontainers", "embedded")

#: the embedded broker's settings, which the container's broker takes too
SERVER_PROPERTIES_TEMPLATE = OPS_KAFKA_DIR / "server.properties.template"
#: the settings of the embedded broker's topology (its roles, listeners, ports, data
#: directory): the container has its own (testcontainers' KafkaContainer, devstack.tc_kafka)
TOPOLOGY_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "controller.quorum.voters",
        "controller.listener.names",
        "listeners",
        "advertised.listeners",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
    }
)


class KafkaChoiceError(RuntimeError):
    """The broker asked for cannot be had; the message says why and what to change."""


@dataclass(frozen=True)
class Taken:
    """The broker a session runs on: its path, image (testcontainers only), bootstrap
    address and container id (testcontainers only)."""

    path: KafkaPath
    bootstrap: str
    image: str = ""
    container: str = ""

    def describe(self) -> str:
        if self.path == "testcontainers":
            return f"testcontainers {self.image} (container {self.container}) at {self.bootstrap}"
        return f"{self.path} at {self.bootstrap}"


def choose(env: Mapping[str, str], docker_answers: Callable[[], bool]) -> KafkaPath:
    """The path to take (the module's docstring); KafkaChoiceError when a forced one cannot
    be taken or the variables contradict each other."""
    choice = env.get(CHOICE_ENV, "").strip().lower() or "auto"
    if choice not in CHOICES:
        raise KafkaChoiceError(f"{CHOICE_ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    if env.get(EXTERNAL_ENV):
        if choice != "auto":
            raise KafkaChoiceError(
                f"{CHOICE_ENV}={choice} and {EXTERNAL_ENV}={env[EXTERNAL_ENV]} are both set: "
                "unset one of them"
            )
        return "external"
    if choice == "embedded":
        return "embedded"
    if docker_answers():
        return "testcontainers"
    if choice == "testcontainers":
        raise KafkaChoiceError(
            f"{CHOICE_ENV}=testcontainers, but no Docker engine answers at "
            f"DOCKER_HOST={env.get('DOCKER_HOST', '(unset: the default socket)')}"
        )
    return "embedded"


def image(env: Mapping[str, str]) -> str:
    """The image testcontainers starts: ``ONCEONLY_TEST_KAFKA_IMAGE``, else apache/kafka."""
    return env.get(IMAGE_ENV, "").strip() or DEFAULT_IMAGE


def docker_answers() -> bool:
    """True if the Docker engine of the environment (DOCKER_HOST, or the default socket)
    answers a ping within 3 s."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


def write_record(env: Mapping[str, str], taken: Taken) -> None:
    """``taken`` as JSON into the file ``ONCEONLY_TEST_KAFKA_RECORD`` names, if it is set."""
    target = env.get(RECORD_ENV)
    if target:
        Path(target).write_text(json.dumps(asdict(taken)) + "\n", encoding="utf-8")


def read_record(path: Path) -> Taken | None:
    """The record a session wrote, or None if it wrote none (no test asked for a broker,
    or the broker never started)."""
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return Taken(**fields)


def env_name(key: str) -> str:
    """A broker setting as the apache/kafka image (and compose/kafka/'s) reads it from the
    environment: ``KAFKA_`` + the key upper-cased, ``_`` -> ``__``, ``-`` -> ``___``,
    ``.`` -> ``_`` (log.dirs -> KAFKA_LOG_DIRS)."""
    name = key.replace("_", "__").replace("-", "___").replace(".", "_")
    return "KAFKA_" + name.upper()


def broker_env(template: Path = SERVER_PROPERTIES_TEMPLATE) -> dict[str, str]:
    """The embedded broker's settings (but its topology) as KAFKA_* variables: the container
    runs the broker the other paths run (one partition by default, replication factor 1
    for the internal topics, records up to 8 MiB, no rebalance delay...)."""
    out: dict[str, str] = {}
    for line in template.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in TOPOLOGY_KEYS:
            continue
        if "$" in value:
            raise KafkaChoiceError(
                f"{template}: {key} is a template value ({value}): add it to TOPOLOGY_KEYS "
                "and give the container its own"
            )
        out[env_name(key)] = value
    return out

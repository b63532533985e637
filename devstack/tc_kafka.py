"""testcontainers' KafkaContainer for the images laid out like apache/kafka.

testcontainers-python's KafkaContainer is written for Confluent's images: ``with_kraft()``
refuses any tag under 7.0.0 (a Confluent Platform version: apache/kafka:4.1.1 is refused
before a container exists), and the script it starts the broker with edits and runs
``/etc/confluent/docker/*``, which neither the official apache/kafka image nor ours
(compose/kafka/) has. What is kept: its two-step start (the container waits for a script
that is written once the broker's port is mapped, so the broker can advertise the address
the host reaches it at), its listeners (PLAINTEXT on 9093 for the host, BROKER on 9092,
CONTROLLER on 9094), its wait for "Kafka Server started" and its clean-up.

What :class:`ApacheKafkaContainer` changes: no Confluent version check; no Confluent boot
command; the start script exports the advertised listeners and runs the image's own start
script (apache/kafka's ``/etc/kafka/docker/run``, or ``/opt/kafka/bin/kafka-run.sh`` in
ours), which formats the storage with ``CLUSTER_ID`` and starts the broker from the
``KAFKA_*`` variables; and the broker gets the embedded broker's settings
(devstack.session_kafka.broker_env) and a data directory both images have.
"""

from __future__ import annotations

from textwrap import dedent
from typing import Self

from testcontainers.community.kafka import KafkaContainer

from devstack.session_kafka import broker_env

#: the images' start scripts, in the order they are looked for
START_SCRIPTS = ("/etc/kafka/docker/run", "/opt/kafka/bin/kafka-run.sh")
#: writable by the broker's user in apache/kafka (a volume) and in ours
DATA_DIR = "/var/lib/kafka/data"
HEAP = "-Xms256m -Xmx512m"  #: the embedded broker's heap in the test session
STARTUP_TIMEOUT_S = 120  #: testcontainers waits 30 s, short for a JVM on a busy small machine


def start_script(
    listener: str, host: str, port: int, scripts: tuple[str, ...] = START_SCRIPTS
) -> str:
    """The script the container runs once ``host:port`` (the host's way to it) is known: the
    first of ``scripts`` the image has, with the advertised listeners exported."""
    candidates = " ".join(scripts)
    return dedent(
        f"""\
        #!/bin/sh
        # written by devstack.tc_kafka once the broker's port is mapped on the host
        broker_ip=$(hostname -i | cut -d' ' -f1)
        export KAFKA_ADVERTISED_LISTENERS={listener}://{host}:{port},BROKER://$broker_ip:9092
        for run in {candidates}; do
            if [ -x "$run" ]; then exec "$run"; fi
        done
        echo "no Kafka start script in this image (looked for {candidates})" >&2
        exit 1
        """
    )


class ApacheKafkaContainer(KafkaContainer):
    """A single KRaft node (broker and controller) of an apache/kafka-like image."""

    def __init__(self, image: str) -> None:
        super().__init__(image)
        for name, value in broker_env().items():
            self.with_env(name, value)
        self.with_env("KAFKA_LOG_DIRS", DATA_DIR)
        self.with_env("KAFKA_HEAP_OPTS", HEAP)
        self.with_kraft()

    def _verify_min_kraft_version(self) -> None:
        """No check: the tag is Kafka's own version, and every apache/kafka image is KRaft."""

    def _configure_kraft(self) -> None:
        super()._configure_kraft()
        self.boot_command = ""  # Confluent's configure script: not in these images

    def tc_start(self) -> None:
        host = self.get_container_host_ip()
        port = self.get_exposed_port(self.port)
        script = start_script(self.listener_name, host, port)
        self.create_file(script.encode("utf-8"), KafkaContainer.TC_START_SCRIPT)

    def start(self, timeout: int = STARTUP_TIMEOUT_S) -> Self:
        super().start(timeout)
        return self

"""The embedded Kafka broker, for real: a JVM per test, no mocks.

Each test runs its own broker from its own run directory on free ports, so they coexist
with the session broker and with any broker a developer has running.
"""

from __future__ import annotations

import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from devstack.broker import EmbeddedBroker
from devstack.exceptions import BrokerError
from devstack.jars import kafka_classpath
from devstack.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def classpath_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Resolve the broker's classpath once for the module (mvn takes a few seconds)."""
    run_dir = tmp_path_factory.mktemp("classpath")
    kafka_classpath(run_dir)
    return run_dir / "kafka.classpath"


@pytest.fixture
def run_dir(tmp_path: Path, classpath_file: Path) -> Path:
    """A fresh run directory that already holds the cached classpath."""
    directory = tmp_path / "run"
    directory.mkdir()
    shutil.copy2(classpath_file, directory / "kafka.classpath")  # keeps the mtime
    return directory


@pytest.fixture
def broker(run_dir: Path) -> Iterator[EmbeddedBroker]:
    instance = EmbeddedBroker(run_dir, port=free_port(), heap_mb=256)
    try:
        yield instance
    finally:
        instance.stop()


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10).values():
        future.result(timeout=15)


def _produce(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[object] = []
    # A new topic's partition may answer NOT_LEADER for a moment; the producer retries.
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(15) == 0, "the record was not delivered within 15 s"
    assert errors == [None]


Record = tuple[bytes | None, bytes | None]


def _read_from_beginning(bootstrap: str, topic: str, *, timeout_s: float = 20.0) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                continue
            records.append((msg.key(), msg.value()))
        raise AssertionError(f"did not reach the end of {topic} within {timeout_s} s")
    finally:
        consumer.close()


def _cluster_id(run_dir: Path) -> str:
    for line in (run_dir / "broker" / "data" / "meta.properties").read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1]
    raise AssertionError("meta.properties has no cluster.id")


def test_a_record_survives_a_restart_on_the_same_run_dir(
    broker: EmbeddedBroker, run_dir: Path
) -> None:
    bootstrap = broker.start()
    assert bootstrap == f"127.0.0.1:{broker.port}"
    assert broker.is_running()
    assert (run_dir / "broker" / "logs" / "server.log").stat().st_size > 0
    cluster_id = _cluster_id(run_dir)

    topic = f"restart-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    _produce(bootstrap, topic, b"delivery-1", b'{"kept": true}')

    # A second broker on the same data directory is refused before it touches the data.
    with pytest.raises(BrokerError, match="already running"):
        EmbeddedBroker(run_dir, port=free_port()).start()

    broker.stop()
    assert not broker.is_running()
    broker.stop()  # idempotent

    broker.start()  # same run dir, a new controller port: the data is reused, not formatted
    assert _cluster_id(run_dir) == cluster_id
    assert _read_from_beginning(broker.bootstrap, topic) == [(b"delivery-1", b'{"kept": true}')]

    broker.kill()
    assert not broker.is_running()
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=1)


def test_a_taken_port_fails_with_a_clear_error(run_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        broker = EmbeddedBroker(run_dir, port=port)
        with pytest.raises(BrokerError, match=rf"127\.0\.0\.1:{port} is already in use"):
            broker.start()
        assert not broker.is_running()


def test_a_broker_that_dies_during_start_up_reports_why(run_dir: Path) -> None:
    # Data formatted for another node: Kafka refuses it and exits at once.
    data = run_dir / "broker" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text(
        "version=1\ncluster.id=Q2x1c3RlcklkT2ZPdGhlcg\nnode.id=7\n"
        "directory.id=xU0zxTMErpWrjAMAiOgEUw\n"
    )
    broker = EmbeddedBroker(run_dir, port=free_port(), heap_mb=128)
    with pytest.raises(BrokerError, match="exited during start-up") as caught:
        broker.start()
    message = str(caught.value)
    assert "Stored node id 7" in message
    assert "delete it to start afresh" in message
    assert str(run_dir / "broker" / "logs" / "server.log") in message
    assert not broker.is_running()


def test_an_out_of_range_heap_is_refused(run_dir: Path) -> None:
    with pytest.raises(BrokerError, match="heap of 1024 MB"):
        EmbeddedBroker(run_dir, port=free_port(), heap_mb=1024)

"""Fixtures: a real Kafka broker for the session, and factories built on it.

The broker comes from, in order: ONCEONLY_KAFKA_BOOTSTRAP if it is set; a
testcontainers KRaft container (apache/kafka:4.1.1, or ONCEONLY_TEST_KAFKA_IMAGE) if a
Docker engine answers; else onceonly's own embedded broker (official Apache Kafka jars
fetched with Maven) on a free port. ONCEONLY_TEST_KAFKA=testcontainers (or embedded)
forces a path: then it is taken or the session fails, never another. The path taken is
the session's last line ("kafka: ..."); devstack/session_kafka.py has the details.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings as hypothesis_settings

from devstack import session_kafka
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, TopicMissing, read_to_end
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs
from testkit.xdist_groups import GroupByFixture

# Hypothesis's per-example deadline (200 ms) is a timing check, and this machine is shared:
# CI's test-newest failed an example at 366 ms with make test running beside it. A property
# test asserts behaviour; how fast is the benchmarks' question (bench/). Each test's own
# settings (max_examples, ...) still apply over this profile.
hypothesis_settings.register_profile("onceonly", deadline=None)
hypothesis_settings.load_profile("onceonly")

if TYPE_CHECKING:
    from devstack.cluster import LocalCluster


#: the broker the session took, for the summary line
_TAKEN = pytest.StashKey[session_kafka.Taken]()


#: under pytest-xdist (``make test``: ``-n 2``), each worker's broker as it described it
_WORKERS_TOOK = pytest.StashKey[list[str]]()

#: the session fixtures of the three-node clusters: their tests all run on one xdist worker,
#: so a session starts each cluster once (three JVMs each), not once per worker
_CLUSTER_FIXTURES = ("kafka_cluster", "kafka_sasl_cluster")


def _took(config: pytest.Config, taken: session_kafka.Taken) -> None:
    config.stash[_TAKEN] = taken
    workeroutput = getattr(config, "workeroutput", None)  # set on an xdist worker only
    if workeroutput is not None:
        workeroutput["kafka"] = taken.describe()
    session_kafka.write_record(os.environ, taken)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(GroupByFixture(_CLUSTER_FIXTURES), "onceonly-cluster-group")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    described = getattr(node, "workeroutput", {}).get("kafka")
    if described:
        node.config.stash.setdefault(_WORKERS_TOOK, []).append(described)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    taken = config.stash.get(_TAKEN, None)
    if taken is not None:
        terminalreporter.write_line(f"kafka: {taken.describe()}")
    for described in sorted(config.stash.get(_WORKERS_TOOK, [])):
        terminalreporter.write_line(f"kafka: {described}")


@pytest.fixture(scope="session")
def kafka_bootstrap(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[str]:
    """The bootstrap address of a real broker for the whole session."""
    try:
        path = session_kafka.choose(os.environ, session_kafka.docker_answers)
    except session_kafka.KafkaChoiceError as exc:
        pytest.fail(f"kafka: {exc}", pytrace=False)
    if path == "external":
        external = os.environ[session_kafka.EXTERNAL_ENV]
        _took(pytestconfig, session_kafka.Taken("external", external))
        yield external
        return
    if path == "testcontainers":
        from devstack.tc_kafka import ApacheKafkaContainer

        image = session_kafka.image(os.environ)
        with ApacheKafkaContainer(image) as container:
            bootstrap = container.get_bootstrap_server()
            container_id = container.get_container_id()[:12]
            _took(pytestconfig, session_kafka.Taken(path, bootstrap, image, container_id))
            yield bootstrap
        return
    from devstack.broker import EmbeddedBroker
    from devstack.ports import free_port

    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka"), port=free_port(), heap_mb=512)
    broker.start()
    _took(pytestconfig, session_kafka.Taken("embedded", broker.bootstrap))
    try:
        yield broker.bootstrap
    finally:
        broker.kill()  # the session's data is thrown away: no clean shutdown to wait for


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local three-node KRaft cluster (``python -m devstack broker --nodes 3``) for the session,
    started only by the tests that ask for it: three JVMs are heavy on a small machine.
    A test that kills a node restarts it (``cluster.node(n).start()``) before it ends."""
    from devstack.cluster import LocalCluster
    from devstack.ports import free_run_of_ports

    port = free_run_of_ports(3)
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), port=port, nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.kill()  # the session's data is thrown away: no clean shutdown to wait for


#: the SCRAM user of the session's SASL cluster
SASL_USER = ("onceonly", "onceonly-test-secret")


@pytest.fixture(scope="session")
def kafka_sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """``python -m devstack broker --nodes 3 --sasl``: the three-node cluster behind a SCRAM-SHA-256
    listener, for the session; started only by the tests that ask for it."""
    from devstack.cluster import LocalCluster, ScramUser
    from devstack.ports import free_run_of_ports

    port = free_run_of_ports(3)
    user = ScramUser(*SASL_USER)
    cluster = LocalCluster(tmp_path_factory.mktemp("sasl"), port=port, nodes=3, user=user)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.kill()  # the session's data is thrown away: no clean shutdown to wait for


@pytest.fixture
def settings_factory(kafka_bootstrap: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings on the session broker, with topic names of this test's own."""

    def make(**overrides: Any) -> Settings:
        given = {"run_dir": tmp_path / "run", "produce_timeout_ms": 5000} | overrides
        return own_topics(kafka_bootstrap, **given)

    return make


#: the tests' payloads carry fixed message dates (testkit.payloads: 2026-11-29, Nylas's
#: January 2025), which the worker would skip as past ONCEONLY_LEDGER_RETENTION's 15
#: days; a test of the retention sets its own
TEST_LEDGER_RETENTION = timedelta(days=3650)


def own_topics(bootstrap: str, *, own_app: bool = False, **overrides: Any) -> Settings:
    """Settings on ``bootstrap`` whose four topics (and, ``own_app``, the worker's app id)
    have names no other test uses; ``overrides`` as given."""
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "deliveries_topic": f"deliveries-{suffix}",
        "ledger_topic": f"replies-{suffix}",
        "dead_letter_topic": f"dead-letters-{suffix}",
        "decisions_topic": f"decisions-{suffix}",
        "ledger_retention": TEST_LEDGER_RETENTION,
    }
    if own_app:
        values["app_id"] = f"onceonly-{suffix}"
    return Settings(**values | overrides)


@pytest.fixture
def topics_factory() -> Callable[[Settings], Settings]:
    """Create a settings object's topics on its broker; return the settings."""

    def make(settings: Settings) -> Settings:
        Admin(Connection.from_settings(settings)).ensure_topics(topic_specs(settings))
        return settings

    return make


@pytest.fixture
async def producer_factory() -> AsyncIterator[Callable[[Settings], AsyncProducer]]:
    """Async producers with onceonly's production settings, closed after the test."""
    made: list[AsyncProducer] = []

    def make(settings: Settings) -> AsyncProducer:
        producer = AsyncProducer(Connection.from_settings(settings))
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout_s=1)


def consume_all(settings: Settings, topic: str) -> list[Any]:
    """Every record of ``topic`` on the settings' brokers from the beginning to its current
    end (confluent Messages); none for a topic that does not exist yet."""
    try:
        return read_to_end(Connection.from_settings(settings), topic)
    except TopicMissing:
        return []

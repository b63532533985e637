"""onceonly's topics on a real three-node cluster: three replicas, two in sync to write."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from devstack.cluster import LocalCluster
from onceonly.foundation.kafka import (
    Admin,
    BrokerUnavailable,
    Connection,
    TopicMismatch,
    TopicMissing,
    TopicSpec,
)
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs
from tests.conftest import own_topics

pytestmark = pytest.mark.integration


_T = TypeVar("_T")


def _until(ask: Callable[[], _T], done: Callable[[_T], bool], within_s: float) -> _T:
    """Ask until ``done``; a node restarting or a topic's metadata still spreading may leave
    one request unanswered (BrokerUnavailable, TopicMissing) on a busy machine: asked again
    until ``within_s``, then the last answer (or error) stands."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            answer = ask()
            if done(answer) or time.monotonic() > deadline:
                return answer
        except (BrokerUnavailable, TopicMissing):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _settings(cluster: LocalCluster, **overrides: object) -> Settings:
    return own_topics(cluster.bootstrap, **{"partitions": 2} | overrides)


def test_on_three_brokers_every_topic_gets_three_replicas_and_min_insync_two(
    kafka_cluster: LocalCluster,
) -> None:
    settings = _settings(kafka_cluster)
    admin = Admin(Connection.from_settings(settings))

    statuses = admin.ensure_topics(topic_specs(settings))

    names = [
        settings.deliveries_topic,
        settings.ledger_topic,
        settings.dead_letter_topic,
        settings.decisions_topic,
    ]
    assert [(s.name, s.replicas) for s in statuses] == [(n, 3) for n in names]
    # metadata reaches each broker in its own time: ask until the one asked has them all
    shapes = _until(admin.topic_shapes, lambda shapes: set(names) <= set(shapes), 30)
    assert [shapes[n][1] for n in names] == [3] * len(names)
    configs = _until(lambda: admin.topic_configs(names), lambda _: True, 30)
    assert [configs[n]["min.insync.replicas"] for n in names] == ["2"] * len(names)


def test_an_existing_topic_with_one_replica_is_refused_naming_the_count(
    kafka_cluster: LocalCluster,
) -> None:
    settings = _settings(kafka_cluster)
    admin = Admin(Connection.from_settings(settings))
    admin.ensure_topics(
        [TopicSpec(settings.deliveries_topic, 2, {"cleanup.policy": "delete"}, replication=1)]
    )

    with pytest.raises(
        TopicMismatch, match="has 1 replica\\(s\\) per partition, onceonly is configured for 3"
    ):
        admin.ensure_topics(topic_specs(settings))


def test_with_one_broker_down_existing_topics_still_want_three_replicas(
    kafka_cluster: LocalCluster,
) -> None:
    """A worker or `onceonly topics` started while one node of three restarts: metadata
    lists two brokers, the topics still need their three replicas (not 1, refused)."""
    settings = _settings(kafka_cluster)
    admin = Admin(Connection.from_settings(settings))
    admin.ensure_topics(topic_specs(settings))
    down = kafka_cluster.node(3)
    down.kill()
    try:
        # fenced after broker.session.timeout.ms
        assert _until(admin.broker_ids, lambda ids: 3 not in ids, 60) == {1, 2}

        statuses = admin.ensure_topics(topic_specs(settings))

        assert {s.replicas for s in statuses} == {3}
        assert admin.replication_for(None) == 3
    finally:
        down.start()

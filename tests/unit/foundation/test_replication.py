"""Replication decisions: the factor from the broker count, min.insync, what mismatches."""

from __future__ import annotations

from typing import Any

import pytest

from onceonly.foundation.kafka import KafkaAdapterError, replicated_config
from onceonly.foundation.kafka._replication import cluster_size, replication_factor
from onceonly.foundation.kafka._replication import topic_problems as problems_of
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs


@pytest.mark.parametrize(("brokers", "factor"), [(1, 1), (2, 1), (3, 3), (5, 3)])
def test_unset_the_factor_is_three_from_three_brokers_on_else_one(
    brokers: int, factor: int
) -> None:
    assert replication_factor(None, brokers) == factor


def test_the_cluster_size_counts_the_brokers_answering() -> None:
    assert cluster_size({1, 2, 3}, []) == 3
    assert cluster_size({1}, [[1], [1]]) == 1


def test_a_broker_that_is_down_still_counts_by_the_partitions_assigned_to_it() -> None:
    """Node 2 of three restarting: metadata lists 1 and 3, its partitions still name it."""
    size = cluster_size({1, 3}, [[1, 2, 3], [2, 3, 1], [3]])

    assert size == 3
    assert replication_factor(None, size) == 3


def test_a_configured_factor_wins() -> None:
    assert replication_factor(2, 3) == 2


def test_a_factor_above_the_broker_count_is_refused_naming_the_variable() -> None:
    with pytest.raises(
        KafkaAdapterError, match="ONCEONLY_REPLICATION_FACTOR=3 but the cluster has 1"
    ):
        replication_factor(3, 1)


@pytest.mark.parametrize(
    ("factor", "config"), [(1, {}), (2, {}), (3, {"min.insync.replicas": "2"})]
)
def test_min_insync_is_two_from_three_replicas_on(factor: int, config: dict[str, str]) -> None:
    assert replicated_config(factor) == config


def test_every_topic_takes_the_configured_factor() -> None:
    specs = topic_specs(Settings(replication_factor=3))
    assert {s.replication for s in specs} == {3}
    assert {s.replication for s in topic_specs(Settings())} == {None}


def _problems(**overrides: Any) -> list[str]:
    values: dict[str, Any] = {
        "want_partitions": 8,
        "have_partitions": 8,
        "want_replicas": 3,
        "have_replicas": 3,
        "want_config": {"min.insync.replicas": "2"},
        "have_config": {"min.insync.replicas": "2", "retention.ms": "1"},
    }
    values.update(overrides)
    return problems_of("t", **values)


def test_a_topic_as_configured_has_no_problem() -> None:
    assert _problems() == []


def test_a_replica_count_mismatch_is_reported_like_a_partition_mismatch() -> None:
    assert _problems(have_replicas=1) == [
        "t has 1 replica(s) per partition, onceonly is configured for 3 "
        "(ONCEONLY_REPLICATION_FACTOR)"
    ]
    assert _problems(have_partitions=4) == ["t has 4 partitions, onceonly is configured for 8"]


def test_a_min_insync_mismatch_is_reported() -> None:
    assert _problems(have_config={"min.insync.replicas": "1"}) == [
        "t has min.insync.replicas=1, onceonly needs min.insync.replicas=2"
    ]

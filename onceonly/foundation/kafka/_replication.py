"""How many copies a topic keeps, and what an existing topic must look like: pure decisions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from onceonly.foundation.kafka.exceptions import KafkaAdapterError

#: a cluster of this many brokers or more gets this many replicas by default
REPLICATED = 3
#: with that many replicas, a write is acknowledged once this many have it
MIN_INSYNC = 2


def replication_factor(configured: int | None, brokers: int) -> int:
    """``ONCEONLY_REPLICATION_FACTOR`` if set, else 3 on a cluster of 3 brokers or more, else 1.

    Raises KafkaAdapterError for a factor the cluster cannot hold (Kafka would refuse it
    as INVALID_REPLICATION_FACTOR, without saying which variable to fix).
    """
    if configured is None:
        return REPLICATED if brokers >= REPLICATED else 1
    if configured > brokers:
        raise KafkaAdapterError(
            f"ONCEONLY_REPLICATION_FACTOR={configured} but the cluster has {brokers} "
            f"broker(s): lower it to {brokers} or less, or add brokers"
        )
    return configured


def cluster_size(answering: Iterable[int], replicas: Iterable[Iterable[int]]) -> int:
    """How many brokers the cluster has: those a metadata request lists (the ones up) and
    every broker a partition is assigned to. A broker that is down or restarting is left
    out of the list but stays in its partitions' replicas, so one broker of three being
    down does not make the cluster look like two (which would want 1 replica and refuse
    every existing topic with 3)."""
    return len(set(answering) | {broker for assigned in replicas for broker in assigned})


def replicated_config(factor: int) -> dict[str, str]:
    """Topic settings for ``factor`` replicas: ``min.insync.replicas=2`` from 3 replicas on,
    so an acknowledged write (acks=all) is on two brokers and one broker may fail."""
    return {"min.insync.replicas": str(MIN_INSYNC)} if factor >= REPLICATED else {}


def topic_problems(
    name: str,
    *,
    want_partitions: int,
    have_partitions: int,
    want_replicas: int,
    have_replicas: int,
    want_config: Mapping[str, str],
    have_config: Mapping[str, str],
) -> list[str]:
    """What differs between an existing topic and what onceonly needs (empty: nothing)."""
    problems: list[str] = []
    if have_partitions != want_partitions:
        problems.append(
            f"{name} has {have_partitions} partitions, onceonly is configured for {want_partitions}"
        )
    if have_replicas != want_replicas:
        problems.append(
            f"{name} has {have_replicas} replica(s) per partition, onceonly is configured "
            f"for {want_replicas} (ONCEONLY_REPLICATION_FACTOR)"
        )
    for key, want in want_config.items():
        have = have_config.get(key)
        if have != want:
            problems.append(f"{name} has {key}={have}, onceonly needs {key}={want}")
    return problems

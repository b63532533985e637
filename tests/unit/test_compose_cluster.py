"""docker-compose.cluster.yml: three KRaft nodes that agree on their quorum, replication
that survives one node, and clients that know every node; and the parsing of
``kafka-topics --describe`` the cluster test judges by."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.compose_cluster import (
    PartitionState,
    busiest_leader,
    fully_replicated,
    min_insync,
    parse_topic_describe,
    taken_over,
)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "docker-compose.cluster.yml"
CLIENTS = ("topics", "ingest", "worker")


def load() -> dict[str, Any]:
    return dict(yaml.safe_load(CLUSTER.read_text(encoding="utf-8")))


def kafka_nodes(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Service -> its environment, for every service that is a KRaft node."""
    return {
        name: dict(service.get("environment") or {})
        for name, service in compose["services"].items()
        if "KAFKA_NODE_ID" in (service.get("environment") or {})
    }


def cluster_problems(compose: dict[str, Any]) -> list[str]:
    """What is wrong with the override, one line each; empty when it is a sound cluster."""
    problems: list[str] = []
    nodes = kafka_nodes(compose)
    if len(nodes) != 3:
        problems.append(f"{len(nodes)} Kafka nodes, not 3")
    ids = {name: int(env["KAFKA_NODE_ID"]) for name, env in nodes.items()}
    if len(set(ids.values())) != len(ids):
        problems.append(f"node ids repeat: {ids}")
    expected_voters = {f"{node_id}@{name}:9093" for name, node_id in ids.items()}
    for name, env in nodes.items():
        voters = set(str(env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")).split(","))
        if voters != expected_voters:
            problems.append(f"{name}: voters {sorted(voters)}, not {sorted(expected_voters)}")
        if set(str(env.get("KAFKA_PROCESS_ROLES", "")).split(",")) != {"broker", "controller"}:
            problems.append(f"{name}: not a combined broker and controller")
        if int(env.get("KAFKA_DEFAULT_REPLICATION_FACTOR", 1)) != 3:
            problems.append(f"{name}: default replication factor is not 3")
        if int(env.get("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", 1)) != 3:
            problems.append(f"{name}: the consumer offsets topic does not have 3 replicas")
        for key in ("KAFKA_MIN_INSYNC_REPLICAS", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
            if int(env.get(key, 1)) != 2:
                problems.append(f"{name}: {key} is not 2")
        advertised = str(env.get("KAFKA_ADVERTISED_LISTENERS", ""))
        if f"PLAINTEXT://{name}:9092" not in advertised.split(","):
            problems.append(f"{name}: advertises {advertised!r}, not its own name")
    cluster_ids = {str(env.get("CLUSTER_ID")) for env in nodes.values()}
    if len(cluster_ids) != 1 or None in cluster_ids:
        problems.append(f"the nodes do not share one CLUSTER_ID: {cluster_ids}")
    host_ports = [p for n in nodes for p in compose["services"][n].get("ports") or []]
    host_sides = [re.sub(r":\d+$", "", str(p)) for p in host_ports]
    if len(set(host_sides)) != len(host_sides):
        problems.append(f"two nodes publish the same host port: {host_ports}")
    for client in CLIENTS:
        env = compose["services"][client].get("environment") or {}
        servers = {s.split(":")[0] for s in str(env.get("ONCEONLY_KAFKA_BOOTSTRAP", "")).split(",")}
        if servers != set(nodes):
            problems.append(f"{client}: bootstrap {sorted(servers)}, not every node")
        if int(env.get("ONCEONLY_REPLICATION_FACTOR", 0)) != 3:
            problems.append(f"{client}: ONCEONLY_REPLICATION_FACTOR is not 3")
    return problems


def test_the_override_is_a_three_node_cluster_that_survives_one_loss() -> None:
    assert cluster_problems(load()) == []


def test_every_new_node_has_a_volume_and_a_health_check() -> None:
    compose = load()
    for name in kafka_nodes(compose):
        if name == "kafka":  # the base file's node: its volume and check are there
            continue
        service = compose["services"][name]
        assert service["healthcheck"]["test"]
        volume = service["volumes"][0].split(":")[0]
        assert volume in compose["volumes"]


def _node(compose: dict[str, Any], name: str) -> dict[str, Any]:
    env: dict[str, Any] = compose["services"][name]["environment"]
    return env


@pytest.mark.parametrize(
    ("what", "breaks"),
    [
        (
            "a voter missing",
            lambda c: _node(c, "kafka-3").update(
                KAFKA_CONTROLLER_QUORUM_VOTERS="1@kafka:9093,2@kafka-2:9093"
            ),
        ),
        (
            "a voter on the wrong id",
            lambda c: [
                _node(c, n).update(
                    KAFKA_CONTROLLER_QUORUM_VOTERS="1@kafka:9093,2@kafka-3:9093,3@kafka-2:9093"
                )
                for n in ("kafka", "kafka-2", "kafka-3")
            ],
        ),
        ("two nodes with one id", lambda c: _node(c, "kafka-3").update(KAFKA_NODE_ID=2)),
        ("another cluster id", lambda c: _node(c, "kafka-2").update(CLUSTER_ID="other")),
        ("one replica", lambda c: _node(c, "kafka").update(KAFKA_DEFAULT_REPLICATION_FACTOR=1)),
        ("min ISR 1", lambda c: _node(c, "kafka-2").update(KAFKA_MIN_INSYNC_REPLICAS=1)),
        ("a node gone", lambda c: c["services"].pop("kafka-3")),
        (
            "a client on one node",
            lambda c: c["services"]["worker"]["environment"].update(
                ONCEONLY_KAFKA_BOOTSTRAP="kafka:9092"
            ),
        ),
        ("a port twice", lambda c: c["services"]["kafka-3"].update(ports=["127.0.0.1:9095:9094"])),
    ],
)
def test_the_check_catches_a_broken_cluster(what: str, breaks: Any) -> None:
    compose = load()
    breaks(compose)
    assert cluster_problems(compose), what


_ROW = "\tTopic: onceonly.deliveries\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tElr: \t"
DESCRIBE = "\n".join(
    [
        "Topic: onceonly.deliveries\tTopicId: 3n1x\tPartitionCount: 3\tReplicationFactor: 3"
        "\tConfigs: min.insync.replicas=2,cleanup.policy=delete",
        _ROW.format(0, 2, "2,3,1", "2,3,1") + "LastKnownElr: ",
        _ROW.format(1, 3, "3,1,2", "3,1") + "LastKnownElr: ",
        _ROW.format(2, 2, "1,2,3", "2,3") + "LastKnownElr: ",
    ]
)


def test_the_describe_is_read_partition_by_partition() -> None:
    rows = parse_topic_describe(DESCRIBE)
    assert rows[0] == PartitionState(0, 2, (2, 3, 1), (2, 3, 1))
    assert [len(r.isr) for r in rows] == [3, 2, 2]
    assert min_insync(DESCRIBE) == 2
    assert min_insync(DESCRIBE.replace("min.insync.replicas=2,", "")) is None
    assert busiest_leader(rows) == 2


def test_replication_and_take_over_are_judged_on_every_partition() -> None:
    rows = parse_topic_describe(DESCRIBE)
    assert not fully_replicated(rows, 3)
    assert fully_replicated(rows[:1], 3)
    assert not taken_over(rows, lost=1, in_sync=2)  # partition 0 still has node 1 in sync
    assert taken_over(rows[2:], lost=1, in_sync=2)
    assert not taken_over(rows[2:], lost=2, in_sync=2)  # led by the lost node
    assert not taken_over([], lost=1, in_sync=2)

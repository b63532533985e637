"""The compose test's decisions: the consumer group's spread, replies per message, the
image's health probe, the host tools to install, the Kafka image's configuration."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from devstack.compose_images import build_command, missing_packages
from devstack.compose_report import operator_view
from devstack.compose_stack import (
    Assignment,
    Verdict,
    group_table,
    parse_group_describe,
    partitions_by_host,
    replies_per_message,
    reply_verdict,
)
from onceonly.operations.container_health import probe_url, role_of

ROOT = Path(__file__).resolve().parents[3]

# kafka-consumer-groups --describe, as Kafka 4.1 prints it (one worker gone: partition 7)
DESCRIBE = """
GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID
onceonly onceonly.deliveries 0  5  5  0  faust-a-1  /10.89.0.5  faust-a
onceonly onceonly.deliveries 1  2  2  0  faust-b-2  /10.89.0.6  faust-b
onceonly onceonly.deliveries 2  0  3  3  faust-a-1  /10.89.0.5  faust-a
onceonly onceonly-thread-changelog 2 0  0  0  faust-a-1  /10.89.0.5  faust-a
onceonly onceonly.deliveries 7  1  1  0  -  -  -
"""


def test_the_describe_table_is_read_per_partition_of_the_topic() -> None:
    rows = parse_group_describe(DESCRIBE, "onceonly.deliveries")
    assert rows == [
        Assignment(0, "faust-a-1", "10.89.0.5"),
        Assignment(1, "faust-b-2", "10.89.0.6"),
        Assignment(2, "faust-a-1", "10.89.0.5"),
        Assignment(7, "-", "-"),
    ]


def test_partitions_are_grouped_by_member_and_the_unheld_ones_apart() -> None:
    spread = partitions_by_host(parse_group_describe(DESCRIBE, "onceonly.deliveries"))
    assert spread == {"10.89.0.5": [0, 2], "10.89.0.6": [1], "-": [7]}


def test_an_empty_group_has_no_rows() -> None:
    assert parse_group_describe("Consumer group 'onceonly' has no active members.", "t") == []


def _line(message_id: str, key: str) -> str:
    return json.dumps({"key": key, "message_id": message_id})


def test_replies_are_judged_by_their_idempotency_keys() -> None:
    lines = [_line("a", "k1"), _line("b", "k2"), "", _line("b", "k2"), _line("c", "k3")]
    lines.append(_line("c", "k4"))
    replies = replies_per_message(lines)
    assert replies == {"a": ["k1"], "b": ["k2", "k2"], "c": ["k3", "k4"]}
    assert reply_verdict(["a", "b", "c", "d"], replies) == Verdict(
        unanswered=["d"], answered_twice=["c"], resent_same_key=["b"]
    )
    assert reply_verdict(["a"], replies) == Verdict([], [], [])


def test_the_group_table_keeps_the_topic_by_partition() -> None:
    table = group_table(DESCRIBE, "onceonly.deliveries").splitlines()
    assert table[0].split()[:3] == ["GROUP", "TOPIC", "PARTITION"]
    assert [line.split()[2] for line in table[1:]] == ["0", "1", "2", "7"]


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["/opt/onceonly/bin/python3", "/opt/onceonly/bin/onceonly", "ingest"], "ingest"),
        (["/opt/onceonly/bin/onceonly", "worker"], "worker"),
        (["onceonly", "--verbose", "worker"], "worker"),
        (["/opt/onceonly/bin/onceonly", "topics"], None),
        (["/opt/kafka/bin/kafka-run.sh"], None),
        (["onceonly"], None),
    ],
)
def test_the_health_check_probes_what_the_container_runs(argv: list[str], role: str | None) -> None:
    assert role_of(argv) == role


def test_the_probe_follows_the_configured_port() -> None:
    assert probe_url("ingest", {}) == "http://127.0.0.1:8000/readyz"
    assert probe_url("worker", {"ONCEONLY_WORKER_PORT": "7000"}) == "http://127.0.0.1:7000/metrics"


def test_only_the_missing_tools_are_installed() -> None:
    present = {"podman", "runc", "buildah"}
    which = lambda cmd: f"/usr/bin/{cmd}" if cmd in present else None  # noqa: E731
    assert missing_packages(which) == ["debootstrap", "podman-compose"]
    assert missing_packages(lambda cmd: "/x") == []


def test_builds_are_niced_and_weighted_lowest_in_docker_format_with_the_base_named() -> None:
    command = build_command(ROOT, "t:1", "localhost/base:1", ROOT / "Dockerfile")
    assert command[:3] == ["nice", "-n", "19"]
    # the RUN steps' own cpu cgroup, which nice does not reach, at the lowest weight
    assert command[command.index("--cpu-shares") + 1] == "2"
    assert command[command.index("--format") + 1] == "docker"  # OCI images drop HEALTHCHECK
    assert "BASE_IMAGE=localhost/base:1" in command
    assert command[-1] == str(ROOT)


def test_the_kafka_image_reads_its_settings_as_the_official_image_does() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,HOST:PLAINTEXT",
        "KAFKA_HEAP_OPTS": "-Xmx512m",
        "KAFKA_SOME__UNDERSCORED___DASHED": "1",
        "CLUSTER_ID": "abc",
    }
    script = ROOT / "compose" / "kafka" / "kafka-config.sh"
    out = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HOST:PLAINTEXT",
        "log.dirs=/var/lib/kafka/data",
        "some_underscored-dashed=1",
    ]


def test_the_report_reads_user_health_check_and_ports_off_an_image() -> None:
    inspected = {
        "Config": {"User": "onceonly", "ExposedPorts": {"8000/tcp": {}, "6066/tcp": {}}},
        "Healthcheck": {"Test": ["CMD", "python3", "-m", "onceonly.operations.container_health"]},
    }
    assert operator_view(inspected) == {
        "user": "onceonly",
        "health check": "python3 -m onceonly.operations.container_health",
        "ports": "6066/tcp 8000/tcp",
    }
    assert operator_view({"Config": {}}) == {
        "user": "root",
        "health check": "none",
        "ports": "none",
    }

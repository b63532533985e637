"""``make compose-cluster-test``: docker-compose.yml with docker-compose.cluster.yml (three
KRaft nodes) run for real, with podman-compose.

    python -m devstack.compose_cluster [--report-dir compose/results]

Uses the images ``make compose-test`` builds (built first if one is missing), brings up
the three Kafka nodes and waits for each one's health check, then the topics, ingest and
one worker; checks with Kafka's own ``kafka-topics --describe`` that every deliveries
partition has 3 replicas, all in sync, and ``min.insync.replicas=2``; posts a signed
sample with ``python -m devstack send --url`` and finds its one reply in the dry-run outbox; kills
the Kafka node leading the most deliveries partitions (``podman kill``: SIGKILL, and no
restart), waits until the others have taken over (ISR of two), posts a second sample and
finds its one reply; then ``down -v``. The report goes to the report folder.
"""

from __future__ import annotations

import argparse
import base64
import re
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from devstack import compose_images as images
from devstack.compose_stack import COMPOSE_FILE, Stack, StackError, replies_per_message, run
from devstack.compose_test import (
    Log,
    onceonly_send,
    stack_variables,
    start,
    topics_then_services,
)
from devstack.jars import kafka_classpath
from devstack.kafka_tools import TOPICS, run_tool
from onceonly.foundation.settings import DEFAULT_TOPICS

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_FILE = ROOT / "docker-compose.cluster.yml"
PROJECT = "onceonly-compose-cluster"
#: node id -> the compose service that runs it (docker-compose.cluster.yml)
NODES = {1: "kafka", 2: "kafka-2", 3: "kafka-3"}
#: every node's host listener: the clients on this host survive any one node's loss
HOST_BOOTSTRAP = "localhost:9094,localhost:9095,localhost:9096"

_PARTITION = re.compile(
    r"Partition:\s*(?P<partition>\d+)\s+Leader:\s*(?P<leader>-?\d+|none)\s+"
    r"Replicas:\s*(?P<replicas>[\d,]*)\s+Isr:\s*(?P<isr>[\d,]*)"
)
_MIN_ISR = re.compile(r"min\.insync\.replicas=(?P<value>\d+)")


@dataclass(frozen=True)
class PartitionState:
    """One partition's row in ``kafka-topics --describe``."""

    partition: int
    leader: int  #: -1 when none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",") if n)


def parse_topic_describe(text: str) -> list[PartitionState]:
    """The partition rows of ``kafka-topics --describe --topic T``, by partition."""
    rows = []
    for match in _PARTITION.finditer(text):
        leader = match["leader"]
        rows.append(
            PartitionState(
                int(match["partition"]),
                -1 if leader == "none" else int(leader),
                _ids(match["replicas"]),
                _ids(match["isr"]),
            )
        )
    return sorted(rows, key=lambda r: r.partition)


def min_insync(text: str) -> int | None:
    """The topic's ``min.insync.replicas`` from the describe's Configs, or None if unset."""
    match = _MIN_ISR.search(text)
    return int(match["value"]) if match else None


def isr_sizes(rows: Sequence[PartitionState]) -> dict[int, int]:
    """Partition -> how many replicas are in sync."""
    return {r.partition: len(r.isr) for r in rows}


def busiest_leader(rows: Sequence[PartitionState]) -> int:
    """The node leading the most partitions (the lowest id on a tie)."""
    counts = Counter(r.leader for r in rows if r.leader >= 0)
    if not counts:
        raise StackError("no partition has a leader")
    return min(counts, key=lambda node: (-counts[node], node))


def fully_replicated(rows: Sequence[PartitionState], replicas: int) -> bool:
    return bool(rows) and all(
        len(r.replicas) == replicas and set(r.isr) == set(r.replicas) for r in rows
    )


def taken_over(rows: Sequence[PartitionState], lost: int, in_sync: int) -> bool:
    """Every partition led by another node than ``lost``, with ``in_sync`` replicas in sync
    and ``lost`` not among them."""
    return bool(rows) and all(
        r.leader not in (lost, -1) and lost not in r.isr and len(r.isr) == in_sync for r in rows
    )


def describe_topic(run_dir: Path, topic: str) -> str:
    result = run_tool(
        TOPICS,
        ["--bootstrap-server", HOST_BOOTSTRAP, "--describe", "--topic", topic],
        classpath=kafka_classpath(run_dir),
        logs_dir=run_dir / "tools" / "logs",
    )
    if result.returncode != 0:
        raise StackError(f"kafka-topics --describe failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def wait_topic(
    run_dir: Path,
    topic: str,
    done: Callable[[list[PartitionState]], bool],
    timeout_s: float = 120.0,
) -> tuple[str, float]:
    """Describe ``topic`` until ``done(rows)`` holds; (the describe, seconds)."""
    started = time.monotonic()
    text = ""
    while time.monotonic() - started < timeout_s:
        text = describe_topic(run_dir, topic)
        if done(parse_topic_describe(text)):
            return text, time.monotonic() - started
        time.sleep(2.0)
    raise StackError(f"{topic} never reached the awaited state:\n{text}")


def sample(stack: Stack, secret: str, expected_lines: int, log: Log) -> str:
    """One signed sample through ingest; then one reply per answered message in the outbox
    (what it holds, in words), or a StackError."""
    onceonly_send(secret, log, bootstrap=HOST_BOOTSTRAP, count=1)
    outbox = stack.outbox_lines()
    replies = replies_per_message(outbox)
    log(f"dry-run outbox: {len(outbox)} line(s): {replies}")
    if len(outbox) != expected_lines or any(len(keys) != 1 for keys in replies.values()):
        raise StackError(f"expected {expected_lines} line(s), one reply per message: {replies}")
    keys = {key for keys in replies.values() for key in keys}
    return f"{len(outbox)} line(s) in the outbox: {len(replies)} message(s), {len(keys)} key(s)"


def scenario(stack: Stack, run_dir: Path, secret: str, log: Log) -> dict[str, object]:
    figures: dict[str, object] = {}
    topic = DEFAULT_TOPICS["deliveries"]
    try:
        t0 = time.monotonic()
        stack.up(*NODES.values())
        for service in NODES.values():
            name = stack.container(service)
            log(f"{name} healthy after {stack.wait_healthy(name):.1f} s")
        figures["kafka nodes healthy s"] = round(time.monotonic() - t0, 1)
        topics_then_services(stack, log)
        figures["time to healthy s"] = round(time.monotonic() - t0, 1)
        log(f"every service healthy {figures['time to healthy s']} s after the first `up`")

        text, _ = wait_topic(run_dir, topic, lambda rows: fully_replicated(rows, 3))
        rows = parse_topic_describe(text)
        figures["min.insync.replicas"] = min_insync(text)
        figures["ISR before"] = isr_sizes(rows)
        figures["describe before"] = text.strip()
        log(f"$ kafka-topics --describe --topic {topic}\n{text}")
        if figures["min.insync.replicas"] != 2:
            raise StackError(f"{topic} has min.insync.replicas={figures['min.insync.replicas']}")

        figures["outbox after the first sample"] = sample(stack, secret, 1, log)

        lost = busiest_leader(rows)
        victim = stack.container(NODES[lost])
        led = sum(r.leader == lost for r in rows)
        figures["killed"] = f"{victim} (node {lost}, leader of {led} of {len(rows)} partitions)"
        log(f"podman kill {victim}")
        kill_started = time.monotonic()
        run(["podman", "kill", victim])
        text, _ = wait_topic(run_dir, topic, lambda rows: taken_over(rows, lost, 2))
        figures["taken over s"] = round(time.monotonic() - kill_started, 1)
        figures["ISR after"] = isr_sizes(parse_topic_describe(text))
        figures["describe after"] = text.strip()
        figures["killed state"] = stack.state(victim)
        log(f"after {figures['taken over s']} s:\n{text}")

        second_started = time.monotonic()
        figures["outbox after the second sample"] = sample(stack, secret, 2, log)
        figures["second sample s"] = round(time.monotonic() - second_started, 1)
        figures["killed state at the end"] = stack.state(victim)
    except (StackError, subprocess.SubprocessError, OSError) as exc:
        figures["error"] = str(exc)
        log(f"FAILED: {exc}")
    return figures


def write_report(report_dir: Path, figures: dict[str, object], log_lines: list[str]) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    day = datetime.now(UTC).date().isoformat()
    path = report_dir / f"compose-cluster-{day}.md"
    error = figures.get("error")
    lines = [
        f"# Three Kafka nodes in compose, {day}",
        "",
        "`python -m devstack.compose_cluster` (make compose-cluster-test): docker-compose.yml",
        "with docker-compose.cluster.yml under podman-compose 1.0.3, podman 4.3.1 (runc),",
        "the images built here by `make compose-test`. Prometheus and Grafana not started.",
        "A sample (`python -m devstack send --count 1`) is a thread of two messages: one reply.",
        "",
        f"Result: {'FAILED: ' + str(error) if error else 'passed'}",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for key, value in figures.items():
        if key not in {"describe before", "describe after", "error"}:
            lines.append(f"| {key} | {value} |")
    for key in ("describe before", "describe after"):
        if key in figures:
            lines += ["", f"`kafka-topics --describe`, {key.split()[1]} the kill:", "", "```"]
            lines += [str(figures[key]), "```"]
    lines += ["", "<details><summary>log</summary>", "", "```", *log_lines, "```", "</details>"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.compose_cluster")
    args, run_dir, log = start(parser, argv)
    if not all(images.image_exists(image) for image in images.all_images()):
        images.build_all(run_dir, log)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    stack = Stack(PROJECT, stack_variables(secret), files=(COMPOSE_FILE, CLUSTER_FILE))
    stack.down()  # a previous run's leftovers, if any
    try:
        figures = scenario(stack, run_dir, secret, log)
    finally:
        stack.down()
        log("down -v: no container, volume or network of the project left")
    figures["total s"] = round(time.monotonic() - log.started)
    log(f"report: {write_report(args.report_dir, figures, log.lines)}")
    return 1 if figures.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())

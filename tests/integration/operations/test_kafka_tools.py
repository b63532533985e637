"""A replay the way a Kafka operator does it: Kafka's own ``kafka-consumer-groups
--reset-offsets`` (ConsumerGroupCommand, from org.apache.kafka:kafka-tools fetched with the
broker's jars) on a real worker's group, and the ledger read with Kafka's console consumer.
A real worker process, the real broker and AgentMail's API on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devstack.jars import kafka_classpath, pom_kafka_version
from devstack.kafka_tools import CONSOLE_CONSUMER, CONSUMER_GROUPS, run_tool
from onceonly.foundation.kafka import Connection, consumer_lag
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import (
    INBOX,
    ROOT,
    SESSION_S,
    Stack,
    WorkerProcess,
    ledger_records,
    until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The broker's classpath, with kafka-tools: one Maven run for the module."""
    return kafka_classpath(tmp_path_factory.mktemp("tools"))


def _env(stack: Stack) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "tests.integration.writers:model",
        "ONCEONLY_TEST_WRITER_LOG": str(stack.tmp / "writer.jsonl"),
        "ONCEONLY_TEST_WRITER_VARY": "1",  # a second call would write a different text
    }


def _model_calls(stack: Stack) -> int:
    path = stack.tmp / "writer.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if json.loads(line)["event"] == "start")


def _tool(
    classpath: str, logs: Path, main_class: str, *args: str
) -> subprocess.CompletedProcess[str]:
    result = run_tool(main_class, args, classpath=classpath, logs_dir=logs)
    assert result.returncode == 0, f"{main_class} {args} failed:\n{result.stdout}{result.stderr}"
    return result


def _ledger_by_console_consumer(stack: Stack, classpath: str) -> list[tuple[str, Any]]:
    """Every record of the ledger topic, in order, as the console consumer prints it."""
    result = _tool(
        classpath,
        stack.tmp / "tools",
        CONSOLE_CONSUMER,
        *("--bootstrap-server", stack.settings.kafka_bootstrap),
        *("--topic", stack.settings.ledger_topic, "--from-beginning"),
        *("--property", "print.key=true", "--property", "key.separator=\t"),
        *("--timeout-ms", "5000"),  # exits once nothing more arrives for 5 s
    )
    rows = [line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line]
    # "Processed a total of N messages": the tool's own count, on stderr
    total = re.search(r"Processed a total of (\d+) messages", result.stderr)
    assert total is not None and int(total.group(1)) == len(rows), result.stderr
    return [(key, None if value == "null" else json.loads(value)) for key, value in rows]


def _new_offsets(output: str, group: str) -> dict[int, int]:
    """``GROUP TOPIC PARTITION NEW-OFFSET`` rows of a reset, by partition."""
    rows = [line.split() for line in output.splitlines()]
    return {int(row[2]): int(row[3]) for row in rows if len(row) == 4 and row[0] == group}


def _reset_to_earliest(stack: Stack, classpath: str) -> str:
    """``kafka-consumer-groups --reset-offsets --to-earliest --execute``, retried while the
    broker still counts a member of the stopped worker (at most a session)."""
    settings = stack.settings
    args = [
        *("--bootstrap-server", settings.kafka_bootstrap, "--group", settings.app_id),
        *("--reset-offsets", "--topic", settings.deliveries_topic, "--to-earliest", "--execute"),
    ]
    deadline = time.monotonic() + SESSION_S + 20
    while True:
        result = _tool(classpath, stack.tmp / "tools", CONSUMER_GROUPS, *args)
        if _new_offsets(result.stdout, settings.app_id):
            return result.stdout
        assert "inactive" in result.stdout + result.stderr, result.stdout + result.stderr
        assert time.monotonic() < deadline, f"the group never emptied:\n{result.stdout}"
        time.sleep(1)


def _lag(stack: Stack) -> dict[int, tuple[int | None, int]]:
    settings = stack.settings
    rows = consumer_lag(
        Connection.from_settings(settings), settings.app_id, settings.deliveries_topic
    )
    return {row.partition: (row.committed, row.end) for row in rows}


def _metric(worker: WorkerProcess, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+]+)$", worker.metrics(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def _process_a_burst(stack: Stack) -> list[str]:
    """Eight conversations, one of them a burst of three messages at once; then every
    message is answered or covered and the group has committed every offset."""
    messages = [f"<k{n}@example.com>" for n in range(7)]
    for n, message in enumerate(messages):
        await stack.deliver(stack.seed(message, f"thr-k{n}", text="hello"))
    burst = [f"<b{n}@example.com>" for n in range(3)]
    await asyncio.gather(*(stack.deliver(stack.seed(m, "thr-b", text="hello")) for m in burst))
    everything = [*messages, *burst]

    def answered() -> bool:
        records = ledger_records(stack)
        keys = [reply_key(INBOX, m) for m in everything]
        states = {records[k].state if k in records else None for k in keys}
        done = states <= {ReplyState.SENT, ReplyState.COVERED}
        return done and all(c == end for c, end in _lag(stack).values())

    await until(stack, answered, "every message answered and every offset committed", 120)
    return everything


def _skipped(workers: list[WorkerProcess]) -> float:
    name = 'onceonly_duplicates_skipped_total{verdict="duplicate"}'
    return sum(_metric(worker, name) for worker in workers)


async def test_a_group_reset_to_the_earliest_offsets_sends_nothing_again(
    stack_factory: Callable[..., Stack], classpath: str
) -> None:
    stack = stack_factory()
    workers = [stack.worker(name, **_env(stack)) for name in ("w1", "w2")]
    messages = await _process_a_burst(stack)
    emails = Counter(e.replied_to_message_id for e in stack.mail.outbox)
    calls = _model_calls(stack)
    ledger = _ledger_by_console_consumer(stack, classpath)
    assert calls >= 1 and sum(emails.values()) >= 8  # seven conversations, and the burst
    assert set(emails.values()) == {1}

    for worker in workers:  # the reset refuses a group with active members
        worker.stop()
    output = _reset_to_earliest(stack, classpath)
    partitions = stack.settings.partitions
    assert _new_offsets(output, stack.settings.app_id) == dict.fromkeys(range(partitions), 0)
    # the reset took: every partition from offset 0 (the deliveries, and the worker's ticks)
    assert {p: committed for p, (committed, _) in _lag(stack).items()} == dict.fromkeys(
        range(partitions), 0
    )

    for worker in workers:  # the same workers, each on its own data
        worker.start()

    def reread() -> bool:
        done = all(c == end for c, end in _lag(stack).values())
        return done and _skipped(workers) >= len(messages)

    await until(stack, reread, "every record read again and skipped as a duplicate", 120)
    await asyncio.sleep(3)  # a reorder window, a model call: what a bug would have sent

    assert Counter(e.replied_to_message_id for e in stack.mail.outbox) == emails
    assert _model_calls(stack) == calls
    # each delivery read again once, and skipped by dedupe (the worker's ticks are not events)
    assert _skipped(workers) == len(messages)
    # the ledger, as an operator reads it: not one record more, every message answered
    after = _ledger_by_console_consumer(stack, classpath)
    assert after == ledger
    states = {key: value["state"] for key, value in after if value is not None}
    assert {states[reply_key(INBOX, m)] for m in messages} <= {"sent", "covered"}
    assert sum(1 for m in messages if states[reply_key(INBOX, m)] == "sent") == len(emails)


def test_the_tools_run_as_a_module_and_are_the_brokers_version() -> None:
    """``python -m devstack.kafka_tools consumer-groups ...``, as the README tells an
    operator to type, on the project's cached classpath: Kafka's tools of the broker's
    version (the pom's), not some other release's."""

    def module(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "devstack.kafka_tools", *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)

    result = module("consumer-groups", "--version")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split()[0] == pom_kafka_version()
    usage = module("reset-everything")
    assert usage.returncode == 2
    assert "{consumer-groups,console-consumer,topics,configs}" in usage.stderr

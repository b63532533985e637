"""A replay of any size: 500,000 records through ``onceonly replay``, run as a user would.

The topic is filled fast (one confluent-kafka producer, small values, big batches); no
worker runs, since what is under test is the copy: it must finish, show its progress,
and say where it stopped when it is stopped, so that a second run takes up from there.

A local broker takes small records as fast as a replay reads them, so the copy never
waits. A real cluster (acks=all over the network, records of a few KB) is slower than the
read; here a produce quota (Kafka's ``producer_byte_rate``, set with its own
ConfigCommand for every client) makes the broker that slow for the replay's producer.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from devstack.jars import kafka_classpath
from devstack.jvm import find_java
from onceonly.foundation.kafka import Connection, read_batches
from onceonly.foundation.kafka._reader import parse_ranges
from onceonly.foundation.settings import Settings
from onceonly.schemas.envelope import REPLAY_HEADER
from tests.integration.workers import ROOT, Stack, worker_env

pytestmark = pytest.mark.integration

PARTITIONS = 4
PROGRESS = re.compile(r"replaying: ([\d,]+) of ([\d,]+) records")
PLAN_END = re.compile(r"^└")
RESUME = re.compile(r"onceonly replay --resume (\S+)")


def fill(settings: Settings, count: int) -> float:
    """``count`` records of a few bytes each, spread over the partitions; the seconds taken."""
    began = time.monotonic()
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    topic = settings.deliveries_topic
    for i in range(count):
        try:
            producer.produce(topic, b"%d" % i, partition=i % PARTITIONS)
        except BufferError:
            producer.flush(10)
            producer.produce(topic, b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0, "the test's records were not all acknowledged"
    return time.monotonic() - began


@contextmanager
def throttled(settings: Settings, bytes_per_s: int) -> Iterator[None]:
    """Every producer of the broker held to ``bytes_per_s`` (the default client quota)."""

    def configs(*change: str) -> None:
        command = [
            find_java(),
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            kafka_classpath((ROOT / ".run").resolve()),
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            settings.kafka_bootstrap,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-default",
            *change,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    configs("--add-config", f"producer_byte_rate={bytes_per_s}")
    try:
        yield
    finally:
        configs("--delete-config", "producer_byte_rate")


def end_offsets(settings: Settings) -> list[int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "ends"})
    try:
        return [
            int(consumer.get_watermark_offsets(TopicPartition(settings.deliveries_topic, p))[1])
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def start_replay(stack: Stack, *args: str) -> subprocess.Popen[str]:
    env = worker_env(stack.settings, mail_url=stack.mail.base_url, data_dir=stack.tmp / "cli")
    return subprocess.Popen(
        [sys.executable, "-m", "onceonly", "replay", *args],
        env={**env, "COLUMNS": "200"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def lines_until(proc: subprocess.Popen[str], seen: list[str], wanted: re.Pattern[str]) -> None:
    """Read the command's output into ``seen`` until a line matches ``wanted`` or it ends."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if wanted.search(line):
            return


def copies(settings: Settings, first: list[int]) -> list[bytes]:
    """The values of the records after ``first`` (per partition) that carry the header."""
    found: list[bytes] = []
    ends = end_offsets(settings)
    for p in range(PARTITIONS):
        if ends[p] <= first[p]:
            continue
        for batch in read_batches(
            Connection.from_settings(settings), settings.deliveries_topic, p, first[p], ends[p] - 1
        ):
            for msg in batch:
                assert any(k == REPLAY_HEADER for k, _ in msg.headers() or ())
                found.append(msg.value())
    return found


@pytest.mark.timeout(900)
def test_a_replay_of_500_000_records_completes_with_progress(
    stack_factory: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = stack_factory(partitions=PARTITIONS)
    count = 500_000
    filled_s = fill(stack.settings, count)
    assert sum(end_offsets(stack.settings)) == count

    began = time.monotonic()
    with throttled(stack.settings, 1_000_000):
        proc = start_replay(stack, "--from-offset", "0")
        out, _ = proc.communicate(timeout=600)
    took = time.monotonic() - began

    assert proc.returncode == 0, out[-3000:]
    assert f"replayed {count} records" in out, out[-3000:]
    shown = [int(m.group(1).replace(",", "")) for m in PROGRESS.finditer(out)]
    assert shown and all(0 <= n <= count for n in shown), out[-3000:]
    assert sum(end_offsets(stack.settings)) == 2 * count  # each record copied once
    print(f"filled {count:,} records in {filled_s:.1f} s; replayed them in {took:.1f} s")


@pytest.mark.timeout(900)
def test_a_stopped_replay_says_where_it_stopped_and_a_second_run_finishes_it(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=PARTITIONS)
    count = 200_000
    fill(stack.settings, count)
    ends = end_offsets(stack.settings)

    with throttled(stack.settings, 1_000_000):
        first = start_replay(stack, "--from-offset", "0")
        seen: list[str] = []
        lines_until(first, seen, PLAN_END)
        # stopped as by Ctrl-C once the plan is out: the copy stops after the list of
        # records it is on (a timed stop raced a copy that can finish in 2 s; a quota
        # tight enough to prevent that timed the broker's answers out instead)
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=120)
    out = "".join(seen) + out
    assert first.returncode == 130, out[-3000:]
    resume = RESUME.search(out)
    assert resume is not None and "replay stopped" in out, out[-3000:]
    left = sum(r.count for r in parse_ranges(resume.group(1)))
    # a part was done (whole partitions or part of one), and a part is left
    assert 0 < left < count, resume.group(1)
    print(f"stopped with {left:,} of {count:,} records left: {resume.group(1)}")

    second = start_replay(stack, "--resume", resume.group(1))
    out2, _ = second.communicate(timeout=600)

    assert second.returncode == 0, out2[-3000:]
    values = copies(stack.settings, ends)
    assert set(values) == {b"%d" % i for i in range(count)}  # every record, at least once
    assert len(values) < count + 1_000  # and the first run's part not again

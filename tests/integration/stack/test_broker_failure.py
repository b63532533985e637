"""A partition leader SIGKILLed on a three-node cluster while signed deliveries arrive.

Real ingest (aiohttp, its production producer: acks=all, idempotent), a real worker
process, the real agentmail SDK against the fake AgentMail server, and three Kafka JVMs
(the session's ``kafka_cluster``). Senders retry a 503 as providers do. The killed node
is started again at the end, so the session's cluster is whole for the next test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka.admin import AdminClient

from devstack.cluster import LocalCluster
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, ProduceFailed
from onceonly.ingest.app import Ingest
from onceonly.schemas.envelope import Envelope
from testkit import payloads, signing
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.conftest import consume_all
from tests.integration.workers import Stack, cluster_settings

pytestmark = pytest.mark.integration

RATE_PER_S = 8
DURATION_S = 24
KILL_AFTER_S = 5
#: a sender that gets no 204 in this long fails the test (the cluster did not recover)
GIVE_UP_S = 60


@dataclass(frozen=True)
class Answer:
    event_id: str
    sent: float
    answered: float
    status: int


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition to leader node id (-1: none), as the broker asked sees it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    metadata = admin.list_topics(topic, timeout=5)
    return {p: part.leader for p, part in metadata.topics[topic].partitions.items()}


def wait_for_new_leaders(bootstrap: str, topic: str, dead: int, since: float) -> float:
    """Seconds from ``since`` until no partition of ``topic`` is led by ``dead`` or by none
    (infinity if that takes over GIVE_UP_S)."""
    while time.monotonic() < since + GIVE_UP_S:
        try:
            now = leaders(bootstrap, topic)
            if all(leader >= 0 and leader != dead for leader in now.values()):
                return time.monotonic() - since
        except Exception:  # a metadata request that failed: ask again
            pass
        time.sleep(0.1)
    return float("inf")


def windows_503(answers: list[Answer], gap_s: float) -> list[tuple[float, float]]:
    """Runs of 503 answers (by answer time), a run broken by a pause of over ``gap_s``."""
    times = sorted(a.answered for a in answers if a.status == 503)
    runs: list[tuple[float, float]] = []
    for at in times:
        if runs and at - runs[-1][1] <= gap_s:
            runs[-1] = (runs[-1][0], at)
        else:
            runs.append((at, at))
    return runs


async def test_a_killed_partition_leader_costs_at_most_an_election_and_loses_nothing(
    kafka_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    settings = cluster_settings(
        kafka_cluster.bootstrap,
        tmp_path,
        partitions=4,
        produce_timeout_ms=5000,
        reorder_window_ms=500,
    )
    producer = AsyncProducer(Connection.from_settings(settings))
    stack = Stack(settings, producer, mail, tmp_path)
    client = TestClient(
        TestServer(Ingest(settings, producer, Admin(Connection.from_settings(settings))).app())
    )
    await client.start_server()
    answers: list[Answer] = []

    async def deliver(n: int) -> None:
        event_id = f"evt-{n}"
        payload = stack.seed(f"<m{n}@example.com>", f"thr-{n}", event_id=event_id)
        body = payloads.dumps(payload)
        give_up = time.monotonic() + GIVE_UP_S
        while True:  # a provider retries until it gets a 2xx
            sent = time.monotonic()
            assert sent < give_up, f"{event_id} got no 204 in {GIVE_UP_S} s of retries"
            response = await client.post(
                "/webhooks/agentmail", data=body, headers=signing.svix_headers(body)
            )
            answers.append(Answer(event_id, sent, time.monotonic(), response.status))
            if response.status == 204:
                return
            assert response.status == 503, await response.text()
            await asyncio.sleep(0.5)

    killed = 0
    try:
        stack.worker("w1")
        await deliver(0)
        await stack.until_sent(1, timeout_s=120)

        started = time.monotonic()
        tasks = []
        for n in range(1, RATE_PER_S * DURATION_S + 1):
            tasks.append(asyncio.ensure_future(deliver(n)))
            await asyncio.sleep(1 / RATE_PER_S)
            if not killed and time.monotonic() - started >= KILL_AFTER_S:
                led = Counter(leaders(settings.kafka_bootstrap, settings.deliveries_topic).values())
                killed = led.most_common(1)[0][0]
                killed_at = time.monotonic()
                kafka_cluster.node(killed).kill()
                survivor = next(nd.bootstrap for nd in kafka_cluster.nodes if nd.node_id != killed)
                election = asyncio.ensure_future(
                    asyncio.to_thread(
                        wait_for_new_leaders,
                        survivor,
                        settings.deliveries_topic,
                        killed,
                        killed_at,
                    )
                )
                emails_at_kill = len(mail.outbox)
        election_s = await election
        await asyncio.gather(*tasks)
        messages = RATE_PER_S * DURATION_S + 1
        await stack.until_sent(messages, timeout_s=180)
        await asyncio.sleep(3)  # a doubled reply would have time to show

        timeout_s = settings.produce_timeout_ms / 1000
        runs = windows_503(answers, gap_s=timeout_s)
        longest = max((end - start for start, end in runs), default=0.0)
        last_503 = max((a.answered for a in answers if a.status == 503), default=killed_at)
        print(
            f"\nbroker failure: killed node {killed}; new leaders after {election_s:.2f} s; "
            f"{sum(a.status == 503 for a in answers)} answers 503 of {len(answers)}; "
            f"longest 503 window {longest:.2f} s; last 503 {last_503 - killed_at:.2f} s "
            f"after the kill (bound: election + produce timeout = "
            f"{election_s + timeout_s:.2f} s)"
        )
        assert longest <= election_s + timeout_s
        assert last_503 - killed_at <= election_s + timeout_s

        accepted = {a.event_id for a in answers if a.status == 204}
        stored = {
            Envelope.decode(r.value()).event_id
            for r in consume_all(settings, settings.deliveries_topic)
            if r.value()  # the worker's ticks are empty records
        }
        assert accepted <= stored
        stack.check_alive()  # the worker answered through it all
        assert len(mail.outbox) > emails_at_kill
        replies = Counter(e.replied_to_message_id for e in mail.outbox)
        assert len(replies) == messages
        assert [m for m, count in replies.items() if count > 1] == []
        changelog = f"{settings.app_id}-events-changelog"
        admin = Admin(Connection.from_settings(settings))
        assert admin.topic_shapes()[changelog][1] == 3
        assert admin.topic_configs([changelog])[changelog]["min.insync.replicas"] == "2"
    finally:
        await client.close()
        for worker in stack.workers:
            worker.kill()
        with contextlib.suppress(ProduceFailed):  # records of a failed run may be unsent
            producer.close(timeout_s=1)
        if killed:
            kafka_cluster.node(killed).start()

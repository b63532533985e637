"""A broker outage mid-run: 503s within the timeout, 204s once it is back, nothing lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from devstack.broker import EmbeddedBroker
from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs
from onceonly.ingest.app import Ingest
from onceonly.schemas.envelope import Envelope
from testkit import payloads, signing
from tests.conftest import consume_all

pytestmark = pytest.mark.integration


async def test_outage_gives_503_then_204_with_no_accepted_delivery_missing(
    tmp_path: Path,
) -> None:
    broker = EmbeddedBroker(tmp_path / "outage", port=free_port(), heap_mb=384)
    broker.start()
    settings = Settings(
        kafka_bootstrap=broker.bootstrap,
        partitions=2,
        produce_timeout_ms=2000,
        nylas_webhook_secret=SecretStr(signing.NYLAS_SECRET),
    )
    connection = Connection.from_settings(settings)
    Admin(connection).ensure_topics(topic_specs(settings))
    producer = AsyncProducer(connection)
    client = TestClient(TestServer(Ingest(settings, producer, Admin(connection)).app()))
    await client.start_server()
    accepted: list[str] = []

    async def deliver(n: int) -> tuple[int, float]:
        body = payloads.dumps(payloads.nylas_message(notification_id=f"n-{n}"))
        started = time.monotonic()
        response = await client.post(
            "/webhooks/nylas", data=body, headers=signing.nylas_headers(body)
        )
        if response.status == 204:
            accepted.append(f"n-{n}")
        return response.status, time.monotonic() - started

    try:
        assert (await deliver(0))[0] == 204
        broker.stop()

        status, took = await deliver(1)
        assert status == 503
        assert took < settings.produce_timeout_ms / 1000 + 1.0
        assert (await client.get("/readyz")).status == 503

        broker.start()
        # a sender keeps retrying; the producer reconnects on its own
        deadline = time.monotonic() + 60
        while (await deliver(2))[0] != 204:
            assert time.monotonic() < deadline, "ingest did not recover after the broker returned"
            await asyncio.sleep(0.5)
        for n in range(3, 8):
            assert (await deliver(n))[0] == 204

        stored = {
            Envelope.decode(r.value()).event_id
            for r in consume_all(settings, settings.deliveries_topic)
        }
        assert set(accepted) <= stored
        assert {"n-0", "n-2", "n-7"} <= stored
    finally:
        await client.close()
        producer.close(timeout_s=1)
        broker.stop()

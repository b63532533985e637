"""Ingest answers 503, not 204, when the broker does not acknowledge in time.

A real confluent-kafka producer pointed at a port where no broker listens: the record
is never acknowledged, so nothing may be reported as accepted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection
from onceonly.foundation.settings import Settings
from onceonly.ingest.app import Ingest
from testkit import payloads, signing


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    settings = Settings(
        kafka_bootstrap=f"127.0.0.1:{free_port()}",
        produce_timeout_ms=1000,
        agentmail_webhook_secret=SecretStr(signing.SVIX_SECRET),
    )
    producer = AsyncProducer(Connection.from_settings(settings))
    ingest = Ingest(settings, producer, Admin(Connection.from_settings(settings)))
    test_client: TestClient = TestClient(TestServer(ingest.app()))  # type: ignore[type-arg]
    await test_client.start_server()
    yield test_client
    await test_client.close()
    # librdkafka fails the unacknowledged record at its first scan after message.timeout.ms
    # (1 s here), up to a second later: flush long enough for that, or close finds it still
    # queued (seen under load in CI, on the oldest allowed confluent-kafka)
    producer.close(timeout_s=10)


async def test_a_produce_that_does_not_finish_is_a_503_with_retry_after(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    body = payloads.dumps(payloads.agentmail_received())

    response = await client.post(
        "/webhooks/agentmail", data=body, headers=signing.svix_headers(body)
    )

    assert response.status == 503
    assert response.headers["Retry-After"] == "5"
    assert (await response.json())["check"] == "broker_unavailable"

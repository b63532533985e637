"""Ingest end to end on the real broker: what is acknowledged is in Kafka, and nothing else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.partitioner import DefaultPartitioner
from pydantic import SecretStr

from onceonly.foundation.kafka import Admin, Connection
from onceonly.foundation.settings import Settings
from onceonly.ingest.app import Ingest
from onceonly.schemas.envelope import Envelope
from testkit import payloads, signing
from tests.conftest import consume_all
from tests.integration.ingest.hostile_live import ROUTES

pytestmark = pytest.mark.integration

Client = TestClient  # type: ignore[type-arg]


def _secrets() -> dict[str, Any]:
    return signing.provider_secrets()


@pytest.fixture
async def ingest_factory(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
    producer_factory: Callable[[Settings], Any],
) -> AsyncIterator[Callable[..., Awaitable[tuple[Client, Settings]]]]:
    """An ingest app on a test server, with all five providers configured and fresh topics."""
    clients: list[Client] = []

    async def make(**overrides: Any) -> tuple[Client, Settings]:
        settings = topics_factory(settings_factory(**{**_secrets(), **overrides}))
        ingest = Ingest(
            settings, producer_factory(settings), Admin(Connection.from_settings(settings))
        )
        client: Client = TestClient(TestServer(ingest.app()))
        await client.start_server()
        clients.append(client)
        return client, settings

    yield make
    for client in clients:
        await client.close()


def _deliveries(settings: Settings) -> list[Any]:
    return consume_all(settings, settings.deliveries_topic)


def _expected_partition(key: bytes, partitions: int) -> int:
    """The partition faust (aiokafka) would choose for this key."""
    every = list(range(partitions))
    return int(DefaultPartitioner()(key, every, every))


#: each provider's payload, and how it signs one
SIGNED: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[bytes], dict[str, str]]]] = {
    "agentmail": (payloads.agentmail_received, signing.svix_headers),
    "nylas": (payloads.nylas_message, signing.nylas_headers),
    "stripe": (payloads.stripe_event, signing.stripe_headers),
    "github": (payloads.github_issue, signing.github_headers),
    "standard": (payloads.standard_event, signing.standard_headers),
}


@pytest.mark.parametrize("provider", sorted(SIGNED))
async def test_a_valid_delivery_is_in_kafka_as_verified_on_its_threads_partition(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]], provider: str
) -> None:
    client, settings = await ingest_factory()
    payload, sign = SIGNED[provider]
    body = payloads.dumps(payload())

    response = await client.post(ROUTES[provider], data=body, headers=sign(body))

    assert response.status == 204
    [record] = _deliveries(settings)
    envelope = Envelope.decode(record.value())
    assert envelope.raw.encode() == body
    assert record.key() == envelope.thread_key.encode()
    assert record.partition() == _expected_partition(record.key(), settings.partitions)
    assert envelope.provider.startswith(provider)


async def test_a_repeat_delivery_gets_204_and_is_left_to_the_processors(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, settings = await ingest_factory()
    body = payloads.dumps(payloads.agentmail_received(event_id="evt_same"))
    headers = signing.svix_headers(body, msg_id="msg_same")

    first = await client.post("/webhooks/agentmail", data=body, headers=headers)
    second = await client.post("/webhooks/agentmail", data=body, headers=headers)

    assert (first.status, second.status) == (204, 204)
    events = [Envelope.decode(r.value()).event_id for r in _deliveries(settings)]
    assert events == ["evt_same", "evt_same"]


def _agentmail(body: bytes, **kw: Any) -> tuple[bytes, dict[str, str]]:
    return body, signing.svix_headers(body, **kw)


GOOD = payloads.dumps(payloads.agentmail_received())

BAD_INPUTS: dict[str, tuple[str, Callable[[], tuple[bytes, dict[str, str]]], int, str]] = {
    "wrong secret": (
        "/webhooks/agentmail",
        lambda: _agentmail(GOOD, secret="whsec_" + "b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="),
        401,
        "bad_signature",
    ),
    "tampered body": (
        "/webhooks/agentmail",
        lambda: (GOOD + b" ", signing.svix_headers(GOOD)),
        401,
        "bad_signature",
    ),
    "missing signature header": (
        "/webhooks/agentmail",
        lambda: (
            GOOD,
            {k: v for k, v in signing.svix_headers(GOOD).items() if k != "svix-signature"},
        ),
        401,
        "missing_header",
    ),
    "signature entry with no comma": (
        "/webhooks/standard/crm",
        lambda: (GOOD, {**signing.standard_headers(GOOD), "webhook-signature": "v1abcdef"}),
        401,
        "malformed_header",
    ),
    "timestamp too old": (
        "/webhooks/agentmail",
        lambda: _agentmail(GOOD, at=datetime.now(UTC) - timedelta(minutes=10)),
        401,
        "timestamp_out_of_tolerance",
    ),
    "stripe timestamp outside 300 s": (
        "/webhooks/stripe",
        lambda: (GOOD, signing.stripe_headers(GOOD, at=datetime.now(UTC).timestamp() - 400)),
        401,
        "timestamp_out_of_tolerance",
    ),
    "body not utf-8": (
        "/webhooks/nylas",
        lambda: (b"\xff\xfe{}", signing.nylas_headers(b"\xff\xfe{}")),
        401,
        "body_not_utf8",
    ),
    "verified body not json": (
        "/webhooks/nylas",
        lambda: (b"hello", signing.nylas_headers(b"hello")),
        400,
        "not_json",
    ),
    "verified body without event id": (
        "/webhooks/stripe",
        lambda: (b'{"type":"x"}', signing.stripe_headers(b'{"type":"x"}')),
        400,
        "no_event_id",
    ),
    "unknown standard source": (
        "/webhooks/standard/other",
        lambda: (GOOD, signing.standard_headers(GOOD)),
        404,
        "not_configured",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
async def test_bad_input_gets_its_status_and_writes_nothing(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]], case: str
) -> None:
    client, settings = await ingest_factory()
    path, build, status, check = BAD_INPUTS[case]
    body, headers = build()

    response = await client.post(path, data=body, headers=headers)

    assert response.status == status
    assert (await response.json())["check"] == check
    assert _deliveries(settings) == []


async def test_a_body_above_the_limit_is_refused_with_413_and_writes_nothing(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, settings = await ingest_factory(max_body_bytes=4096)
    body = payloads.dumps(payloads.agentmail_received(text="x" * 10_000))

    response = await client.post("/webhooks/agentmail", data=body, headers=_agentmail(body)[1])

    assert response.status == 413
    assert _deliveries(settings) == []


async def test_a_provider_without_a_secret_answers_404(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, _ = await ingest_factory(github_webhook_secret=None)
    body = payloads.dumps(payloads.github_issue())

    headers = signing.github_headers(body)

    response = await client.post("/webhooks/github", data=body, headers=headers)

    assert response.status == 404


async def test_nylas_challenge_is_echoed_as_plain_text(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, _ = await ingest_factory()

    response = await client.get("/webhooks/nylas", params={"challenge": "abc123"})

    assert response.status == 200
    assert await response.text() == "abc123"
    assert response.content_type == "text/plain"


async def test_rejections_are_counted_by_reason_in_metrics(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, _ = await ingest_factory()
    body, headers = _agentmail(GOOD, at=datetime.now(UTC) - timedelta(minutes=10))
    await client.post("/webhooks/agentmail", data=body, headers=headers)

    text = await (await client.get("/metrics")).text()

    labels = 'provider="agentmail",reason="timestamp_out_of_tolerance"'
    assert f"onceonly_deliveries_rejected_total{{{labels}}} 1.0" in text


async def test_readyz_reports_the_broker(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, _ = await ingest_factory()

    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/healthz")).status == 200


async def test_envelope_carries_the_payload_timestamp_and_ids(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    client, settings = await ingest_factory()
    payload = payloads.agentmail_received(
        event_id="evt_1", thread_id="thr_9", message_id="<m1@x>", timestamp="2026-01-02T03:04:05Z"
    )
    body = payloads.dumps(payload)

    await client.post("/webhooks/agentmail", data=body, headers=signing.svix_headers(body))

    [record] = _deliveries(settings)
    envelope = Envelope.decode(record.value())
    assert (envelope.event_id, envelope.thread_key, envelope.message_id) == (
        "evt_1",
        "agentmail:thr_9",
        "<m1@x>",
    )
    assert envelope.account_id == "support@agentmail.to"
    assert envelope.occurred_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert json.loads(envelope.raw) == payload


async def test_with_an_envelope_secret_every_record_carries_its_mac(
    ingest_factory: Callable[..., Awaitable[tuple[Client, Settings]]],
) -> None:
    from onceonly.schemas.envelope import has_valid_mac

    client, settings = await ingest_factory(envelope_secret=SecretStr("shared-secret"))
    body, headers = _agentmail(GOOD)

    response = await client.post("/webhooks/agentmail", data=body, headers=headers)

    assert response.status == 204
    [record] = _deliveries(settings)
    assert has_valid_mac(record.value(), record.headers() or [], b"shared-secret")

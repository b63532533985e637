"""The load's deliveries: signed as Svix signs them, each of a run's messages alone in its
thread, and the record ingest would make of one."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import svix.webhooks

from bench._agent_load import build_messages
from bench._load import sign_pool, thread_message, webhook_secret
from bench._proc_records import ingested
from onceonly.schemas.envelope import Envelope


def test_every_delivery_verifies_with_the_run_s_secret() -> None:
    secret = webhook_secret()
    pool = sign_pool(secret, 3) + [m.delivery for m in build_messages(secret, 4, "t", 0.5)]
    for delivery in pool:
        svix.webhooks.Webhook(secret).verify(delivery.body.decode(), delivery.headers)
    assert len({d.headers["svix-id"] for d in pool}) == len(pool)


def test_a_run_s_message_is_alone_in_its_thread() -> None:
    message_id, body = thread_message("t", 7, datetime.now(UTC), text="hello")
    message = json.loads(body)["message"]
    assert message_id == message["message_id"] == "<t-000007@mail.example.com>"
    assert message["thread_id"] == "thr_t_000007"
    assert message["text"] == "hello"


def test_the_record_is_ingest_s_envelope_keyed_by_its_thread() -> None:
    now = datetime.now(UTC)
    message_id, body = thread_message("t", 1, now)
    key, value, headers = ingested(body, now)
    envelope = Envelope.decode(value)
    assert envelope.message_id == message_id
    assert key == envelope.thread_key.encode()
    assert headers == [*envelope.headers()]

"""The sample deliveries of `python -m devstack send`, signed so that ingest's verification accepts
them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import svix.webhooks

from testkit.samples import SampleError, agentmail_story, samples, secret_for
from testkit.signing import SVIX_SECRET

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_the_story_sends_the_newer_message_first_then_the_older_one_three_times() -> None:
    story = agentmail_story(SVIX_SECRET, copies=3, now=NOW)

    assert len(story) == 4
    assert len({s.event_id for s in story[1:]}) == 1
    assert story[0].event_id != story[1].event_id


def test_the_copies_are_one_svix_message_as_a_retry_is() -> None:
    story = agentmail_story(SVIX_SECRET, copies=2, now=NOW)

    assert story[1].headers["svix-id"] == story[2].headers["svix-id"]


def test_both_messages_are_of_one_thread() -> None:
    story = agentmail_story(SVIX_SECRET, copies=1, now=NOW)

    assert len({json.loads(s.body)["message"]["thread_id"] for s in story}) == 1


def test_every_sample_verifies_with_the_secret_it_was_signed_with() -> None:
    for sample in agentmail_story(SVIX_SECRET, copies=1, now=NOW):
        svix.webhooks.Webhook(SVIX_SECRET).verify(sample.body, sample.headers)


def test_a_file_body_is_sent_count_times_with_the_event_id_ingest_reads() -> None:
    body = b'{"id": "evt_file", "type": "invoice.paid", "data": {"object": {"id": "in_9"}}}'

    sent = samples("stripe", "whsec_x", copies=2, body=body, now=NOW)

    assert [s.event_id for s in sent] == ["evt_file", "evt_file"]


def test_an_unknown_provider_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SampleError, match="use one of agentmail"):
        samples("mailgun", "s", copies=1, now=NOW)


def test_a_missing_secret_names_the_variable_to_set() -> None:
    with pytest.raises(SampleError, match="ONCEONLY_STRIPE_WEBHOOK_SECRET"):
        secret_for("stripe", {})

"""GitHub's event id comes from the signed body, never from the unsigned X-GitHub-Delivery.

A captured delivery replayed with a fresh ``X-GitHub-Delivery`` still verifies (GitHub
signs the body only); if that header were the event id, the replay would pass dedupe and
run the handler's effects again.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime

from multidict import CIMultiDict, CIMultiDictProxy
from pydantic import SecretStr

from onceonly.foundation.settings import Settings
from onceonly.ingest.app import providers_from_settings
from onceonly.schemas.envelope import Envelope
from testkit import payloads, signing

RECEIVED = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _accept(body: bytes, headers: dict[str, str]) -> Envelope:
    """What ingest does with a GitHub delivery before producing it: verify, then normalise."""
    github = providers_from_settings(
        Settings(github_webhook_secret=SecretStr(signing.GITHUB_SECRET))
    )["github"]
    received = CIMultiDictProxy(CIMultiDict(headers))  # as aiohttp hands them over
    github.verify(body, received)
    return github.normalise(body.decode("utf-8"), received, RECEIVED)


def test_a_replay_under_a_fresh_delivery_id_has_the_same_event_id() -> None:
    body = payloads.dumps(payloads.github_issue())
    original = signing.github_headers(body, delivery=str(uuid.uuid4()))
    replay = {**original, "X-GitHub-Delivery": str(uuid.uuid4())}

    first, second = _accept(body, original), _accept(body, replay)

    assert first.event_id == second.event_id
    assert first.dedupe_key == second.dedupe_key
    assert first.event_id == "sha256:" + hashlib.sha256(body).hexdigest()
    assert original["X-GitHub-Delivery"] not in first.event_id


def test_different_bodies_have_different_event_ids() -> None:
    one = payloads.dumps(payloads.github_issue())
    other = one.replace(b"}", b" }", 1)  # the same event JSON, other bytes: another delivery
    assert one != other
    same_delivery = str(uuid.uuid4())

    ids = {
        _accept(body, signing.github_headers(body, delivery=same_delivery)).event_id
        for body in (one, other)
    }

    assert len(ids) == 2


def test_a_forged_event_header_on_a_replay_does_not_change_the_event_id() -> None:
    body = payloads.dumps(payloads.github_issue())

    issues = _accept(body, signing.github_headers(body, event="issues"))
    forged = _accept(body, signing.github_headers(body, event="pull_request"))

    assert issues.event_id == forged.event_id


def test_a_delivery_without_the_delivery_header_gets_its_body_id() -> None:
    body = payloads.dumps(payloads.github_issue())
    headers = {k: v for k, v in signing.github_headers(body).items() if k != "X-GitHub-Delivery"}

    envelope = _accept(body, headers)

    assert envelope.event_id == "sha256:" + hashlib.sha256(body).hexdigest()

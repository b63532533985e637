"""The envelope's encoding: a round trip, and versions it does not know are refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from schemas.envelope import Envelope
from schemas.exceptions import SchemaError

ENVELOPE = Envelope(
    provider="agentmail",
    event_id="evt_1",
    event_type="message.received",
    thread_key="agentmail:thr_1",
    account_id="inbox@agentmail.to",
    message_id="<m@x>",
    occurred_at=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    received_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
    truncated=False,
    raw='{"é": "\\u00e9"}',
)


def test_an_envelope_survives_encoding() -> None:
    assert Envelope.decode(ENVELOPE.encode()) == ENVELOPE


def test_an_unknown_version_is_refused_with_advice() -> None:
    data = json.loads(ENVELOPE.encode())
    data["v"] = 99

    with pytest.raises(SchemaError, match="upgrade the worker"):
        Envelope.decode(json.dumps(data))


def test_a_missing_field_is_a_schema_error() -> None:
    data = json.loads(ENVELOPE.encode())
    del data["thread_key"]

    with pytest.raises(SchemaError, match="thread_key"):
        Envelope.decode(json.dumps(data))


def test_the_dedupe_key_is_scoped_by_provider() -> None:
    assert ENVELOPE.dedupe_key == "agentmail:evt_1"

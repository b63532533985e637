"""The reply ledger's record on the wire."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.schemas._samples import changed

FULL = ReplyRecord(
    key="reply-abc",
    inbox_id="agent@agentmail.to",
    message_id="<m1@x>",
    thread_key="agentmail:thr_1",
    state=ReplyState.FAILED,
    created_at=datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC),
    reply_text="Merci — on regarde \u00e7a",
    sent_message_id="<s1@x>",
    covered_by="reply-def",
    attempts=4,
    error="mail API answered 503",
    channel="nylas",
)


def test_a_record_survives_encoding_unchanged() -> None:
    assert ReplyRecord.decode(FULL.encode()) == FULL


def test_every_field_is_written() -> None:
    assert set(json.loads(FULL.encode())) == {f.name for f in fields(ReplyRecord)}


def test_a_record_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(SchemaError, match="version 99"):
        ReplyRecord.decode(changed(FULL, v=99))


def test_the_messages_own_time_survives_a_round_trip() -> None:
    from datetime import UTC, datetime

    from onceonly.schemas.ledger import ReplyRecord, ReplyState

    at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    record = ReplyRecord("k", "i", "<m@x>", "agentmail:t", ReplyState.SENT, at, message_at=at)

    assert ReplyRecord.decode(record.encode()).message_at == at


def test_usage_survives_a_round_trip_and_a_version_3_record_decodes_without_it() -> None:
    from dataclasses import replace

    from onceonly.schemas.ledger import LEDGER_VERSION, Usage

    costed = replace(FULL, usage=Usage("gpt-4o-mini", 120, 35))
    assert LEDGER_VERSION == 4
    assert ReplyRecord.decode(costed.encode()).usage == Usage("gpt-4o-mini", 120, 35)
    older = json.loads(FULL.encode())
    del older["usage"]
    older["v"] = 3
    assert ReplyRecord.decode(json.dumps(older)).usage is None


def test_usages_add_up() -> None:
    from onceonly.schemas.ledger import Usage

    assert Usage("m", 1, 2) + Usage("m", 10, 20) == Usage("m", 11, 22)
    assert (Usage("a", 1, 0) + Usage("b", 0, 1)).model == "a+b"
    assert Usage("m", 3, 4).total == 7

"""The reply ledger's record on the wire."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime

from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.schemas._samples import FULL


def test_every_field_is_written() -> None:
    assert set(json.loads(FULL.encode())) == {f.name for f in fields(ReplyRecord)}


def test_the_messages_own_time_survives_a_round_trip() -> None:

    from onceonly.schemas.ledger import ReplyRecord

    at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    record = ReplyRecord("k", "i", "<m@x>", "agentmail:t", ReplyState.SENT, at, message_at=at)

    assert ReplyRecord.decode(record.encode()).message_at == at


def test_usage_survives_a_round_trip_and_a_version_3_record_decodes_without_it() -> None:
    from dataclasses import replace

    from onceonly.schemas.ledger import LEDGER_VERSION, Usage

    costed = replace(FULL, usage=Usage("gpt-4o-mini", 120, 35))
    assert LEDGER_VERSION == 5
    assert ReplyRecord.decode(costed.encode()).usage == Usage("gpt-4o-mini", 120, 35)
    older = json.loads(FULL.encode())
    del older["usage"]
    older["v"] = 3
    assert ReplyRecord.decode(json.dumps(older)).usage is None


def test_a_record_is_made_when_written_or_for_a_version_4_record_when_its_reply_was() -> None:
    older = json.loads(FULL.encode())
    del older["written_at"]
    older["v"] = 4

    assert ReplyRecord.decode(FULL.encode()).made_at == FULL.written_at
    assert ReplyRecord.decode(json.dumps(older)).made_at == FULL.created_at


def test_usages_add_up() -> None:
    from onceonly.schemas.ledger import Usage

    assert Usage("m", 1, 2) + Usage("m", 10, 20) == Usage("m", 11, 22)
    assert (Usage("a", 1, 0) + Usage("b", 0, 1)).model == "a+b"
    assert Usage("m", 3, 4).total == 7

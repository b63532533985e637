"""The reply ledger's record on the wire."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.schemas.ledger import ReplyRecord, ReplyState, state_bytes
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


@settings(max_examples=300)
@given(text=st.text())
def test_a_records_bytes_are_compact_utf8_json_whatever_its_text(text: str) -> None:
    from dataclasses import replace

    record = replace(FULL, reply_text=text, error=text)
    try:
        expected = json.dumps(
            json.loads(FULL.encode()) | {"reply_text": text, "error": text},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
    except UnicodeEncodeError:  # a lone surrogate: not UTF-8, refused both ways
        with pytest.raises(UnicodeEncodeError):
            record.encode()
        return

    assert record.encode() == expected
    assert ReplyRecord.decode(expected) == record


def test_a_record_with_an_escaped_lone_surrogate_still_decodes() -> None:
    raw = json.loads(FULL.encode()) | {"reply_text": "\ud800"}

    assert ReplyRecord.decode(json.dumps(raw)).reply_text == "\ud800"


def test_a_record_read_again_is_not_decoded_again() -> None:
    raw = FULL.encode()

    assert ReplyRecord.decode(bytes(raw)) is ReplyRecord.decode(bytes(raw))


def test_a_record_in_a_bytearray_or_longer_than_the_kept_size_still_decodes() -> None:
    from dataclasses import replace

    from onceonly.schemas.ledger import DECODED_KEPT_SIZE

    long = replace(FULL, reply_text="x" * DECODED_KEPT_SIZE)

    assert ReplyRecord.decode(bytearray(FULL.encode())) == FULL
    assert ReplyRecord.decode(long.encode()) == long
    assert ReplyRecord.decode(long.encode()) is not ReplyRecord.decode(long.encode())


@pytest.mark.parametrize("value", [None, 3])
def test_a_value_that_is_no_text_is_a_schema_error(value: object) -> None:
    from onceonly.schemas.exceptions import SchemaError

    with pytest.raises(SchemaError):
        ReplyRecord.decode(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", list(ReplyState))
def test_an_encoded_record_holds_its_states_bytes_and_no_other_states(state: ReplyState) -> None:
    at = datetime(2026, 12, 7, tzinfo=UTC)
    encoded = ReplyRecord("k", "i", "<m@x>", "agentmail:t", state, at, "text").encode()

    assert [s for s in ReplyState if state_bytes(s) in encoded] == [state]

"""The envelope's encoding: a round trip, and versions it does not know are refused."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from onceonly.ingest import normalise
from onceonly.ingest.exceptions import PayloadError
from onceonly.schemas.envelope import MAC_HEADER, Envelope, has_valid_mac
from onceonly.schemas.exceptions import SchemaError
from testkit import payloads
from tests.unit.schemas._samples import ENVELOPE


def test_a_missing_field_is_a_schema_error() -> None:
    data = json.loads(ENVELOPE.encode())
    del data["thread_key"]

    with pytest.raises(SchemaError, match="thread_key"):
        Envelope.decode(json.dumps(data))


def test_the_dedupe_key_is_scoped_by_provider() -> None:
    assert ENVELOPE.dedupe_key == "agentmail:evt_1"


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_timestamp_with_no_utc_time_is_a_payload_error(stamp: str) -> None:
    body = json.dumps(payloads.agentmail_received(timestamp=stamp))

    with pytest.raises(PayloadError) as error:
        normalise.agentmail(body, {}, datetime.now(UTC))

    assert error.value.check == "bad_shape"  # answered 400 by ingest


@pytest.mark.parametrize(
    "value",
    [None, b"null", b"[]", b'{"v": 1, "occurred_at": 5}', b"[" * 100_000 + b"]" * 100_000],
)
def test_a_record_ingest_never_writes_is_a_schema_error(value: bytes | None) -> None:
    with pytest.raises(SchemaError):
        Envelope.decode(value)  # type: ignore[arg-type]


def _signed_record(key: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
    envelope = normalise.agentmail(json.dumps(payloads.agentmail_received()), {}, datetime.now(UTC))
    value = envelope.encode()
    return value, envelope.headers(key, value)


def test_a_record_with_its_mac_is_valid() -> None:
    value, headers = _signed_record(b"secret")

    assert has_valid_mac(value, headers, b"secret")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v, h: (v.replace(b"meeting", b"MEETING"), h),  # the value changed
        lambda v, h: (v, [x for x in h if x[0] != MAC_HEADER]),  # no MAC
        lambda v, h: (v, [*h, (MAC_HEADER, b"0" * 64)]),  # two MACs
        lambda v, h: (None, h),  # no value
    ],
    ids=["changed", "missing", "doubled", "null"],
)
def test_a_forged_or_corrupted_record_is_not_valid(tamper: Any) -> None:
    value, headers = tamper(*_signed_record(b"secret"))

    assert not has_valid_mac(value, headers, b"secret")


def test_a_mac_under_another_key_is_not_valid() -> None:
    value, headers = _signed_record(b"secret")

    assert not has_valid_mac(value, headers, b"another secret")


def test_a_time_without_a_zone_is_a_schema_error_that_says_so() -> None:
    data = ENVELOPE.to_json() | {"occurred_at": "2026-01-02T03:04:05"}

    with pytest.raises(SchemaError, match="has no zone"):
        Envelope.from_json(data)


def test_times_are_written_in_utc_with_a_z_whatever_the_hosts_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        written = json.loads(ENVELOPE.encode())
    finally:
        monkeypatch.undo()
        time.tzset()

    assert (written["occurred_at"], written["received_at"]) == (
        "2026-01-02T03:04:05.678Z",
        "2026-01-02T03:04:06.000Z",
    )


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 12, 2, 4, 49, 17, 715_999, tzinfo=UTC),
        datetime(1, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 3, 1, 0, 30, 0, 1_000, tzinfo=timezone(timedelta(hours=14))),
        datetime(2026, 3, 1, 0, 30, 0, 999, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    ],
)
def test_a_time_is_written_as_isoformat_gives_it_in_utc_to_the_millisecond(
    moment: datetime,
) -> None:
    envelope = replace(ENVELOPE, occurred_at=moment)
    expected = moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    assert envelope.to_json()["occurred_at"] == expected

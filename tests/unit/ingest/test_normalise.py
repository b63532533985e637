"""onceonly.ingest.normalise: each provider's verified body becomes the envelope the README
describes.

Each test compares whole envelopes (or one field of one) built from a small body, so a
changed thread key, id, time or flag fails it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from onceonly.ingest import normalise
from onceonly.ingest.exceptions import PayloadError
from onceonly.schemas.envelope import Envelope

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
AT = "2026-11-30T10:00:00Z"
AT_TIME = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _body(data: dict[str, Any]) -> str:
    return json.dumps(data)


def _agentmail(**message: Any) -> Envelope:
    data = {"type": "event", "event_type": "message.received", "event_id": "evt_1"}
    return normalise.agentmail(_body({**data, "message": message}), {}, NOW)


# -- parsing, shared by every provider ----------------------------------------------


def test_a_body_that_is_not_json_is_a_not_json_payload_error() -> None:
    with pytest.raises(PayloadError) as raised:
        normalise.stripe("{not json", {}, NOW)
    assert raised.value.check == "not_json"


def test_json_nested_too_deep_to_parse_is_a_not_json_payload_error() -> None:
    with pytest.raises(PayloadError) as raised:
        normalise.stripe("[" * 100_000, {}, NOW)
    assert raised.value.check == "not_json"


def test_a_json_body_that_is_not_an_object_is_a_bad_shape_payload_error() -> None:
    with pytest.raises(PayloadError) as raised:
        normalise.stripe("[1, 2]", {}, NOW)
    assert raised.value.check == "bad_shape"


@pytest.mark.parametrize("event_id", [None, "", True, 1.5, {"id": "x"}])
def test_an_event_id_that_is_not_non_empty_text_or_a_number_is_a_no_event_id_error(
    event_id: Any,
) -> None:
    with pytest.raises(PayloadError) as raised:
        normalise.stripe(_body({"id": event_id}), {}, NOW)
    assert raised.value.check == "no_event_id"


def test_an_integer_event_id_is_kept_as_its_text() -> None:
    assert normalise.stripe(_body({"id": 42}), {}, NOW).event_id == "42"


# -- each provider's whole envelope ----------------------------------------------------

AGENTMAIL_MESSAGE = {
    "inbox_id": "inbox@agentmail.to",
    "thread_id": "thr_1",
    "message_id": "<m1@x>",
    "timestamp": AT,
    "text": "hello",
}
NYLAS_MESSAGE = {"object": "message", "id": "msg_1", "thread_id": "thr_1", "grant_id": "g_1"}
GITHUB_ISSUE = {
    "action": "opened",
    "repository": {"full_name": "o/r"},
    "issue": {"number": 7},
    "installation": {"id": 99},
}
GITHUB_ID = "sha256:" + hashlib.sha256(_body(GITHUB_ISSUE).encode()).hexdigest()
STRIPE_INVOICE = {"id": "evt_1", "type": "invoice.paid", "created": 1796032800, "account": "acct_1"}


@pytest.mark.parametrize(
    ("normaliser", "data", "headers", "fields"),
    [
        pytest.param(
            normalise.agentmail,
            {"type": "event", "event_type": "message.received", "event_id": "evt_1"}
            | {"message": AGENTMAIL_MESSAGE},
            {},
            (
                "agentmail",
                "evt_1",
                "message.received",
                "agentmail:thr_1",
                "inbox@agentmail.to",
                "<m1@x>",
                AT_TIME,
            ),
            id="agentmail: its thread, inbox and time",
        ),
        pytest.param(
            normalise.nylas,
            {"id": "n1", "type": "message.created", "time": 1796032800}
            | {"data": {"object": NYLAS_MESSAGE}},
            {},
            ("nylas", "n1", "message.created", "nylas:thr_1", "g_1", "msg_1", AT_TIME),
            id="nylas: its thread, grant and time",
        ),
        pytest.param(
            normalise.stripe,
            STRIPE_INVOICE | {"data": {"object": {"id": "in_1"}}},
            {},
            ("stripe", "evt_1", "invoice.paid", "stripe:in_1", "acct_1", None, AT_TIME),
            id="stripe: its account and creation time",
        ),
        pytest.param(
            normalise.github,
            GITHUB_ISSUE,
            {"X-GitHub-Event": "issues"},
            ("github", GITHUB_ID, "issues.opened", "github:o/r#7", "99", None, NOW),
            id="github: by repository and issue",
        ),
        pytest.param(
            normalise.standard("shop"),
            {"type": "order.paid", "timestamp": AT, "data": {"thread_id": "t1", "id": "o1"}},
            {"webhook-id": "msg_1"},
            ("standard.shop", "msg_1", "order.paid", "standard.shop:t1", None, None, AT_TIME),
            id="standard: its source and header id",
        ),
    ],
)
def test_an_event_is_enveloped_whole(
    normaliser: normalise.Normaliser, data: dict[str, Any], headers: dict[str, str], fields: Any
) -> None:
    """Each provider's name, id, type, thread, account, message and time (``fields``, in
    the envelope's order), the receipt time, the untruncated flag and the raw body."""
    body = _body(data)
    expected = Envelope(*fields, received_at=NOW, truncated=False, raw=body)
    assert normaliser(body, headers, NOW) == expected


# -- AgentMail ------------------------------------------------------------------------


def test_an_agentmail_event_without_a_message_takes_the_object_that_has_an_inbox() -> None:
    body = _body(
        {
            "event_type": "message.sent",
            "event_id": "evt_2",
            "note": {"thread_id": "thr_wrong"},
            "send": {"inbox_id": "inbox@x", "thread_id": "thr_9", "message_id": "<s@x>"},
        }
    )
    envelope = normalise.agentmail(body, {}, NOW)
    assert (envelope.thread_key, envelope.account_id, envelope.message_id) == (
        "agentmail:thr_9",
        "inbox@x",
        "<s@x>",
    )


def test_an_agentmail_event_without_a_thread_is_its_own_thread() -> None:
    assert _agentmail(text="hi").thread_key == "agentmail:evt_1"


def test_an_agentmail_event_without_an_event_type_is_of_type_unknown() -> None:
    body = _body({"event_id": "evt_1", "message": {"text": "hi"}})
    assert normalise.agentmail(body, {}, NOW).event_type == "unknown"


def test_an_agentmail_message_without_a_timestamp_occurred_when_it_was_received() -> None:
    assert _agentmail(text="hi").occurred_at == NOW


def test_a_received_message_without_any_text_is_truncated() -> None:
    assert _agentmail(thread_id="thr_1").truncated is True


@pytest.mark.parametrize("field", ["text", "html", "extracted_text"])
def test_a_received_message_with_text_html_or_extracted_text_is_not_truncated(
    field: str,
) -> None:
    assert _agentmail(**{field: "hi"}).truncated is False


def test_a_received_variant_event_without_text_is_truncated() -> None:
    body = _body({"event_type": "message.received.spam", "event_id": "evt_1", "message": {"x": 1}})
    assert normalise.agentmail(body, {}, NOW).truncated is True


def test_an_event_that_is_not_a_received_message_is_never_truncated() -> None:
    body = _body({"event_type": "message.sent", "event_id": "evt_1", "message": {"x": 1}})
    assert normalise.agentmail(body, {}, NOW).truncated is False


# -- timestamps (ISO 8601 and epoch) ---------------------------------------------------


def test_an_iso_timestamp_with_an_offset_is_kept_in_utc() -> None:
    occurred = _agentmail(text="hi", timestamp="2026-11-30T12:00:00+02:00").occurred_at
    assert (occurred, occurred.utcoffset()) == (AT_TIME, timedelta(0))


def test_an_iso_timestamp_without_a_zone_is_taken_as_utc() -> None:
    assert _agentmail(text="hi", timestamp="2026-11-30T10:00:00").occurred_at == AT_TIME


@pytest.mark.parametrize("stamp", ["yesterday", 1796032800, None])
def test_a_timestamp_that_is_not_iso_text_falls_back_to_the_receipt_time(stamp: Any) -> None:
    assert _agentmail(text="hi", timestamp=stamp).occurred_at == NOW


def test_an_iso_timestamp_with_no_utc_time_is_a_bad_shape_payload_error() -> None:
    with pytest.raises(PayloadError) as raised:
        _agentmail(text="hi", timestamp="0001-01-01T00:00:00+14:00")
    assert raised.value.check == "bad_shape"


def _nylas_time(time: Any) -> datetime:
    body = _body({"id": "n1", "type": "message.created", "time": time, "data": {}})
    return normalise.nylas(body, {}, NOW).occurred_at


def test_an_epoch_in_seconds_is_read_as_seconds() -> None:
    assert _nylas_time(1796032800) == AT_TIME


def test_an_epoch_in_milliseconds_is_read_as_milliseconds() -> None:
    assert _nylas_time(1796032800_500) == AT_TIME + timedelta(milliseconds=500)


def test_an_epoch_of_exactly_one_hundred_billion_is_still_seconds() -> None:
    assert _nylas_time(100_000_000_000) == datetime.fromtimestamp(100_000_000_000, tz=UTC)


def test_an_epoch_just_above_one_hundred_billion_is_milliseconds() -> None:
    assert _nylas_time(100_000_000_001) == datetime.fromtimestamp(100_000_000.001, tz=UTC)


def test_a_fractional_epoch_keeps_its_fraction() -> None:
    assert _nylas_time(1796032800.25) == AT_TIME + timedelta(milliseconds=250)


@pytest.mark.parametrize("time", [True, "1796032800", 10**20, None])
def test_an_epoch_that_is_not_a_usable_number_falls_back_to_the_receipt_time(time: Any) -> None:
    assert _nylas_time(time) == NOW


# -- Nylas ----------------------------------------------------------------------------


def _nylas(obj: dict[str, Any], event_type: str = "message.created") -> Envelope:
    body = _body({"id": "n1", "type": event_type, "time": 1796032800, "data": {"object": obj}})
    return normalise.nylas(body, {}, NOW)


def test_a_nylas_object_that_is_not_a_message_has_no_message_id() -> None:
    assert _nylas({"object": "event", "id": "ev_1", "thread_id": "thr_1"}).message_id is None


def test_a_nylas_object_without_a_thread_is_threaded_by_its_own_id() -> None:
    assert _nylas({"object": "contact", "id": "c_1"}).thread_key == "nylas:c_1"


def test_a_nylas_notification_without_an_object_is_its_own_thread() -> None:
    assert _nylas({}).thread_key == "nylas:n1"


def test_a_truncated_nylas_notification_is_flagged_truncated() -> None:
    assert _nylas({"id": "m"}, event_type="message.created.truncated").truncated is True


def test_a_nylas_notification_without_a_type_is_of_type_unknown() -> None:
    assert normalise.nylas(_body({"id": "n1"}), {}, NOW).event_type == "unknown"


# -- Stripe ---------------------------------------------------------------------------


def _stripe(obj: dict[str, Any]) -> Envelope:
    body = _body({"id": "evt_1", "type": "charge.succeeded", "data": {"object": obj}})
    return normalise.stripe(body, {}, NOW)


def test_a_stripe_object_of_an_invoice_is_threaded_by_the_invoice() -> None:
    assert _stripe({"id": "ch_1", "invoice": "in_1"}).thread_key == "stripe:in_1"


def test_a_stripe_event_without_an_object_is_its_own_thread() -> None:
    assert _stripe({}).thread_key == "stripe:evt_1"


def test_a_stripe_event_without_a_type_is_of_type_unknown() -> None:
    assert normalise.stripe(_body({"id": "evt_1"}), {}, NOW).event_type == "unknown"


# -- GitHub ---------------------------------------------------------------------------


def _github(data: dict[str, Any], event: str | None = "issues") -> Envelope:
    headers = {"X-GitHub-Event": event} if event else {}
    return normalise.github(_body(data), headers, NOW)


def test_a_github_pull_request_is_threaded_by_its_number() -> None:
    data = {"repository": {"full_name": "o/r"}, "pull_request": {"number": 3}}
    assert _github(data).thread_key == "github:o/r#3"


def test_a_github_event_without_an_issue_is_threaded_by_its_repository() -> None:
    assert _github({"repository": {"full_name": "o/r"}}).thread_key == "github:o/r"


def test_a_github_issue_without_a_repository_is_its_own_thread() -> None:
    envelope = _github({"issue": {"number": 7}})
    assert envelope.thread_key == f"github:{envelope.event_id}"


def test_a_github_event_without_an_action_is_typed_by_the_event_header_alone() -> None:
    assert _github({}, event="push").event_type == "push"


def test_a_github_delivery_without_an_event_header_is_of_type_unknown() -> None:
    assert _github({"action": "opened"}, event=None).event_type == "unknown.opened"


# -- Standard Webhooks ----------------------------------------------------------------


def _standard(data: dict[str, Any], headers: dict[str, str] | None = None) -> Envelope:
    normaliser = normalise.standard("shop")
    return normaliser(_body(data), {"webhook-id": "msg_1"} if headers is None else headers, NOW)


def test_a_standard_webhook_without_a_thread_is_threaded_by_its_data_id() -> None:
    assert _standard({"data": {"id": "o1"}}).thread_key == "standard.shop:o1"


def test_a_standard_webhook_without_data_is_its_own_thread() -> None:
    assert _standard({}).thread_key == "standard.shop:msg_1"


def test_a_standard_webhook_without_a_type_is_of_type_unknown() -> None:
    assert _standard({}).event_type == "unknown"


def test_a_standard_webhook_without_a_timestamp_occurred_when_it_was_received() -> None:
    assert _standard({}).occurred_at == NOW


def test_a_standard_webhook_without_a_webhook_id_header_is_a_no_event_id_error() -> None:
    with pytest.raises(PayloadError) as raised:
        _standard({}, headers={})
    assert raised.value.check == "no_event_id"


def test_an_offset_timestamp_is_not_confused_with_utc() -> None:
    offset = datetime(2026, 11, 30, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert _standard({"timestamp": offset.isoformat()}).occurred_at == AT_TIME


# -- what a payload error says ----------------------------------------------------------


def _payload_error(body: str, normaliser: normalise.Normaliser = normalise.stripe) -> str:
    with pytest.raises(PayloadError) as raised:
        normaliser(body, {}, NOW)
    return str(raised.value)


def test_a_body_that_is_not_json_says_so_with_the_parsers_reason() -> None:
    assert _payload_error("{").startswith("verified body is not JSON: Expecting property name")


def test_a_body_that_is_not_an_object_says_so() -> None:
    assert _payload_error("[]") == "verified body is JSON but not an object"


@pytest.mark.parametrize(
    ("provider", "where"),
    [
        ("stripe", "id"),
        ("nylas", "id"),
        ("agentmail", "event_id"),
        ("standard", "webhook-id header"),
    ],
)
def test_a_missing_event_id_names_where_it_was_looked_for(provider: str, where: str) -> None:
    normaliser = (
        normalise.standard("shop") if provider == "standard" else getattr(normalise, provider)
    )
    assert _payload_error("{}", normaliser) == f"verified body has no event id ({where})"


def test_a_timestamp_with_no_utc_time_is_quoted_to_forty_characters() -> None:
    stamp = "0001-01-01T00:00:00.000000+14:00:00.000000"
    with pytest.raises(PayloadError) as raised:
        _agentmail(text="hi", timestamp=stamp)
    assert str(raised.value) == f"timestamp {stamp[:40]!r} is outside the calendar in UTC"


def test_an_agentmail_event_with_no_object_at_all_is_its_own_thread_without_an_inbox() -> None:
    body = _body({"event_type": "domain.verified", "event_id": "evt_7"})
    envelope = normalise.agentmail(body, {}, NOW)
    assert (envelope.thread_key, envelope.account_id) == ("agentmail:evt_7", None)


@pytest.fixture
def host_in_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("host_in_tokyo")
def test_a_timestamp_without_a_zone_is_utc_whatever_the_hosts_zone() -> None:
    assert _agentmail(text="hi", timestamp="2026-11-30T10:00:00").occurred_at == AT_TIME


@pytest.mark.usefixtures("host_in_tokyo")
def test_a_timestamp_with_an_offset_is_kept_in_utc_whatever_the_hosts_zone() -> None:
    occurred = _agentmail(text="hi", timestamp="2026-11-30T12:00:00+02:00").occurred_at
    assert occurred.utcoffset() == timedelta(0)


def test_an_event_id_beyond_64_bits_is_kept_whole() -> None:
    body = _body({"id": 2**70, "type": "message.created", "data": {"object": {}}})

    assert normalise.nylas(body, {}, NOW).event_id == str(2**70)

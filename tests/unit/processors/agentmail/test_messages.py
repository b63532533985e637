"""onceonly.processors.mail.agentmail.messages: an AgentMail message as the worker reads it, and its
thread."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from onceonly.processors.mail.agentmail.messages import agentmail_history, inbound_from_agentmail
from onceonly.processors.writer.contract import Inbound, ThreadMessage

FALLBACK = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _inbound(**message: Any) -> Inbound:
    return inbound_from_agentmail(
        message, thread_key="agentmail:t", event_id="e", fallback_time=FALLBACK
    )


EVERY_FIELD = {
    "inbox_id": "inbox@x",
    "message_id": "<m1@x>",
    "thread_id": "thr_1",
    "timestamp": "2026-11-30T10:00:00Z",
    "from": "Ann <ann@example.com>",
    "subject": "Hi",
    "text": "hello",
    "labels": ["received", "unread"],
}


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        pytest.param(
            EVERY_FIELD,
            ("inbox@x", "<m1@x>", "thr_1", AT, "Ann <ann@example.com>", "Hi", "hello"),
            id="every field",
        ),
        pytest.param({}, ("", "", "", FALLBACK, "", None, None), id="none: empty fields"),
    ],
)
def test_an_agentmail_message_becomes_an_inbound(message: dict[str, Any], fields: Any) -> None:
    """Its inbox, id, thread, time (the fallback without one), sender, subject, text and
    labels; the thread key and event id as given."""
    inbox_id, message_id, thread_id, occurred_at, sender, subject, text = fields
    assert _inbound(**message) == Inbound(
        inbox_id=inbox_id,
        message_id=message_id,
        thread_key="agentmail:t",
        thread_id=thread_id,
        event_id="e",
        occurred_at=occurred_at,
        sender=sender,
        subject=subject,
        text=text,
        labels=tuple(message.get("labels", ())),
    )


def test_the_sender_is_read_from_from_underscore_as_the_sdk_names_it() -> None:
    assert _inbound(from_="ann@example.com").sender == "ann@example.com"


def test_the_extracted_text_stands_in_for_a_missing_text() -> None:
    assert _inbound(extracted_text="quoted-free").text == "quoted-free"


def test_the_text_is_preferred_to_the_extracted_text() -> None:
    assert _inbound(text="full", extracted_text="short").text == "full"


def test_a_timestamp_that_is_not_iso_falls_back_to_the_given_time() -> None:
    assert _inbound(timestamp="yesterday").occurred_at == FALLBACK


def _target() -> Inbound:
    return _inbound(inbox_id="Inbox@X", message_id="<m3@x>")


def test_the_history_holds_the_messages_before_the_answered_one_with_every_field() -> None:
    messages = [
        {
            "message_id": "<m1@x>",
            "from": "Ann <ann@example.com>",
            "text": "first",
            "timestamp": "2026-11-30T10:00:00Z",
            "subject": "Hi",
        },
        {"message_id": "<m3@x>", "from": "ann@example.com", "text": "the one answered"},
        {"message_id": "<m4@x>", "from": "ann@example.com", "text": "later"},
    ]
    assert agentmail_history(messages, _target()) == [
        ThreadMessage(
            message_id="<m1@x>",
            sender="Ann <ann@example.com>",
            text="first",
            timestamp=AT,
            own=False,
            subject="Hi",
        )
    ]


def test_a_history_message_from_the_inbox_is_the_agents_own() -> None:
    history = agentmail_history([{"message_id": "<m1@x>", "from_": "Bot <inbox@x>"}], _target())
    assert [(m.sender, m.own) for m in history] == [("Bot <inbox@x>", True)]


def test_a_history_message_labelled_sent_is_the_agents_own() -> None:
    history = agentmail_history(
        [{"message_id": "<m1@x>", "from": "x@y", "labels": ["sent"]}], _target()
    )
    assert history[0].own is True


def test_a_history_message_without_an_id_or_text_has_empty_fields() -> None:
    assert agentmail_history([{}], _target()) == [
        ThreadMessage(message_id="", sender="", text=None, timestamp=None, own=False)
    ]


def test_a_history_message_takes_its_extracted_text_when_it_has_no_text() -> None:
    history = agentmail_history([{"message_id": "<m1@x>", "extracted_text": "e"}], _target())
    assert history[0].text == "e"


def test_a_history_timestamp_that_is_a_datetime_is_kept() -> None:
    history = agentmail_history([{"message_id": "<m1@x>", "timestamp": AT}], _target())
    assert history[0].timestamp == AT


def test_a_history_timestamp_that_is_not_iso_is_none() -> None:
    history = agentmail_history([{"message_id": "<m1@x>", "timestamp": "soon"}], _target())
    assert history[0].timestamp is None


def test_a_history_timestamp_that_is_neither_text_nor_a_datetime_is_none() -> None:
    history = agentmail_history([{"message_id": "<m1@x>", "timestamp": 1796032800}], _target())
    assert history[0].timestamp is None

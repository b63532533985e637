"""What the operator page decides: who may retry what, and what each section says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import SecretStr

from onceonly.operations.ops_view import (
    Refusal,
    authorize,
    choose_letter,
    given_token,
    letter_rows,
    retried_notice,
    skip_table,
    trace_ident,
    webhook_health,
)
from onceonly.operations.replay import DeadLetter
from onceonly.processors.health import WebhookHealth

TOKEN = SecretStr("s3cret-operator-token")


def _letter(at: int, retried_at: str | None = None, **body: object) -> DeadLetter:
    letter = {"reason": f"send_failed: 500 on letter {at}", "check": "send_failed", **body}
    return DeadLetter(at, letter, retried_at)


def test_the_right_token_may_retry() -> None:
    assert authorize(TOKEN, "s3cret-operator-token") is None


def test_no_token_is_refused_with_403_saying_a_token_is_needed() -> None:
    refusal = authorize(TOKEN, None)

    assert refusal is not None and refusal.status == 403
    assert "needs the operator token" in refusal.message


def test_a_wrong_token_is_refused_with_403() -> None:
    refusal = authorize(TOKEN, "s3cret-operator-tokeN")

    assert refusal == Refusal(403, "retry refused: that is not the operator token")


def test_with_no_token_configured_every_retry_is_refused_as_read_only() -> None:
    refusal = authorize(None, "anything")

    assert refusal is not None and refusal.status == 403 and "read-only" in refusal.message


def test_the_token_comes_from_the_form_field_else_a_bearer_header() -> None:
    assert given_token("from-form", "Bearer from-header") == "from-form"
    assert given_token("", "Bearer from-header") == "from-header"
    assert given_token(None, "Basic dXNlcjpwdw==") is None
    assert given_token(None, None) is None


def test_only_an_open_letter_is_chosen_for_a_retry() -> None:
    letters = [_letter(3), _letter(5, retried_at="2026-12-01T10:00:00+00:00")]

    assert choose_letter(letters, 3) is letters[0]
    retried = choose_letter(letters, 5)
    missing = choose_letter(letters, 9)

    assert isinstance(retried, Refusal) and retried.status == 409
    assert "onceonly dead-letters retry 5" in retried.message
    assert missing == Refusal(404, "no dead letter with id 9")


def test_letters_are_shown_newest_first_with_their_reason_key_and_messages() -> None:
    envelope = {"event_id": "evt_1", "message_id": "<m1@example.com>"}
    omitted = {"event_id": "evt_2", "provider": "agentmail"}
    letters = [
        _letter(1, key="reply-abc", envelopes=[envelope], envelopes_omitted=[omitted]),
        _letter(4, partition=2, offset=17),
    ]

    rows = letter_rows(letters)

    assert [r.id for r in rows] == [4, 1]
    assert rows[1].reason == "send_failed: 500 on letter 1" and rows[1].key == "reply-abc"
    assert rows[1].messages == ("<m1@example.com>", "evt_2")
    assert rows[0].messages == () and rows[0].record == "partition 2 offset 17"
    assert rows[1].record == ""


def test_the_notice_after_a_retry_reflects_the_topic_not_the_request() -> None:
    rows = letter_rows([_letter(3, retried_at="2026-12-01T10:00:00+00:00"), _letter(4)])

    assert "dead letter 3 retried at 2026-12-01T10:00:00+00:00" in (retried_notice(rows, 3) or "")
    assert retried_notice(rows, 4) is None  # not retried: no claim that it was
    assert retried_notice(rows, 8) is None


@dataclass(frozen=True)
class _Skip:
    at: datetime
    reason: str
    event_id: str
    message_id: str | None


def test_skips_become_a_table_of_their_fields() -> None:
    at = datetime(2026, 12, 1, 10, tzinfo=UTC)
    skips = [_Skip(at, "own_message", "evt_1", None), {"reason": "duplicate", "extra": 1}]

    table = skip_table(skips)

    assert table.columns == ("at", "reason", "event_id", "message_id", "extra")
    assert table.rows[0] == ("2026-12-01T10:00:00+00:00", "own_message", "evt_1", "", "")
    assert table.rows[1] == ("", "duplicate", "", "", "1")


def test_webhook_health_in_a_sentence() -> None:
    now = 1_000.0

    unwatched = webhook_health(WebhookHealth(None), now)
    unread = webhook_health(WebhookHealth("wh_1"), now)
    failing = webhook_health(WebhookHealth("wh_1", error="ConnectError()"), now)
    enabled = webhook_health(WebhookHealth("wh_1", enabled=True, checked_at=990.0), now)
    disabled = webhook_health(WebhookHealth("wh_1", enabled=False, checked_at=999.6), now)

    assert unwatched.status == "unknown" and "ONCEONLY_AGENTMAIL_WEBHOOK_ID" in unwatched.text
    assert unread.status == "unknown" and "not been read yet" in unread.text
    assert failing.status == "bad" and "ConnectError()" in failing.text
    assert enabled.status == "ok" and enabled.text == "webhook wh_1 is enabled (read 10 s ago)"
    assert disabled.status == "bad" and "DISABLED" in disabled.text
    assert "onceonly catch-up" in disabled.text and "read 0 s ago" in disabled.text


def test_the_trace_id_is_the_trimmed_query_parameter() -> None:
    assert trace_ident({"trace": "  <m1@example.com> "}) == "<m1@example.com>"
    assert trace_ident({"trace": "  "}) is None
    assert trace_ident({}) is None

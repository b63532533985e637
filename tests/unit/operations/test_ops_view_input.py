"""The operator page's input: ids of any length and headers of any bytes are refused
with a reason, never a 500 (issue 35, item 6)."""

from __future__ import annotations

from pydantic import SecretStr

from onceonly.operations.ops_view import (
    Refusal,
    authorize,
    given_token,
    int_param,
    not_a_letter,
    parse_id,
    retry_refusal,
)
from onceonly.operations.replay import RetryReport

TOKEN = SecretStr("s3cret-operator-token")


def test_an_id_of_thousands_of_digits_is_no_id() -> None:
    huge = "9" * 5000

    assert parse_id(huge) is None
    assert int_param({"retried": huge}, "retried") is None
    assert parse_id("12") == 12 and int_param({"retried": "7"}, "retried") == 7


def test_digits_that_are_not_ascii_are_no_id() -> None:
    assert parse_id("٣") is None and parse_id("") is None and parse_id("-1") is None


def test_a_retry_of_no_id_is_refused_404_without_echoing_it() -> None:
    refusal = not_a_letter("1" * 5000)

    assert refusal.status == 404 and len(refusal.message) < 200


def test_a_token_that_is_not_utf8_is_the_wrong_token_not_an_error() -> None:
    # aiohttp hands on a header that is not UTF-8 surrogate-escaped
    given = given_token(None, b"Bearer \xff\xfeab".decode("utf-8", "surrogateescape"))

    assert authorize(TOKEN, given) == Refusal(403, "retry refused: that is not the operator token")


def test_a_letter_left_open_by_a_retry_is_a_refusal_with_its_reason() -> None:
    held = RetryReport(held=((3, "it carries no MAC"),))
    failed = RetryReport(failed=((3, "not sent: the broker refused event e"),))

    assert retry_refusal(3, RetryReport(sent=(3,), events=1)) is None
    refused = retry_refusal(3, held)
    unavailable = retry_refusal(3, failed)
    assert refused is not None and refused.status == 409 and "carries no MAC" in refused.message
    assert unavailable is not None and unavailable.status == 503

"""Dead letters: what a retry may send of one (MACs verified), and what readmit may."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from onceonly.schemas.dead_letter import (
    LETTER_VERSION,
    Original,
    Resend,
    carries_macs,
    encode_letter,
    envelope_fields,
    noted_letters,
    parse_record,
    readmittable,
    resendable,
)
from onceonly.schemas.envelope import Envelope, mac_of
from tests.unit.schemas._samples import ENVELOPE

KEY = b"the-workers-secret"
OLD = b"the-secret-before-the-rotation"
OTHER = replace(ENVELOPE, event_id="evt_2", message_id="<n@x>")


def _letter(*envelopes: Envelope, key: bytes | None = KEY, **extra: Any) -> dict[str, Any]:
    """A letter as the worker writes it (through JSON, as a retry reads it)."""
    body = {"reason": "send_failed: 500", "check": "send_failed", **envelope_fields(envelopes, key)}
    return dict(json.loads(encode_letter({**body, **extra}, 1 << 20)))


def test_a_letter_the_worker_wrote_sends_each_envelope_with_its_mac() -> None:
    sent = resendable(_letter(ENVELOPE, OTHER), KEY)

    assert sent == [
        Resend(ENVELOPE, mac_of(ENVELOPE.encode(), KEY)),
        Resend(OTHER, mac_of(OTHER.encode(), KEY)),
    ]


def test_a_resent_record_has_ingests_headers_and_its_mac() -> None:
    (sent,) = resendable(_letter(ENVELOPE), KEY)

    assert sent.value == ENVELOPE.encode()
    assert sent.headers() == ENVELOPE.headers(KEY, ENVELOPE.encode())


def test_a_letter_carries_its_version() -> None:
    assert _letter(ENVELOPE)["v"] == LETTER_VERSION


def test_a_planted_letter_without_macs_sends_nothing_and_says_why() -> None:
    why = resendable(_letter(ENVELOPE, key=None), KEY)

    assert isinstance(why, str) and "carries no MAC" in why and "readmit" in why


def test_a_forged_mac_holds_the_whole_letter() -> None:
    letter = _letter(ENVELOPE, OTHER)
    letter["macs"][1] = "0" * 64

    why = resendable(letter, KEY)

    assert isinstance(why, str)
    assert "the MAC of event evt_2 does not verify under ONCEONLY_ENVELOPE_SECRET" in why


def test_an_envelope_changed_after_its_mac_was_taken_is_not_sent() -> None:
    letter = _letter(ENVELOPE)
    letter["envelopes"][0]["raw"] = '{"forged": true}'

    assert isinstance(resendable(letter, KEY), str)


def test_without_a_secret_anywhere_envelopes_go_without_a_mac() -> None:
    assert resendable(_letter(ENVELOPE, key=None), None) == [Resend(ENVELOPE, None)]


def test_a_letter_that_keeps_only_the_raw_record_has_nothing_to_resend() -> None:
    for check, words in [("bad_mac", "readmit <id>"), ("not_an_envelope", "was not one")]:
        letter = {"check": check, "reason": "x", "partition": 2, "offset": 7, "value": "{}"}

        why = resendable(letter, KEY)

        assert isinstance(why, str) and "partition 2 offset 7" in why and words in why


def test_a_letter_whose_envelopes_were_omitted_for_size_says_to_replay() -> None:
    letter = _letter(replace(ENVELOPE, raw="x" * 5000))
    small = json.loads(encode_letter(letter, 2000))

    why = resendable(small, KEY)

    assert small["envelopes"] == [] and "macs" not in small
    assert isinstance(why, str) and "evt_1" in why and "onceonly replay" in why


def test_a_letter_too_large_even_without_envelopes_stays_a_json_object() -> None:
    letter = {"check": "bad_mac", "reason": "r" * 5000, "value": "v" * 50_000}

    value = encode_letter(letter, 1000)

    assert len(value) <= 1000 and isinstance(json.loads(value), dict)


def test_a_version_from_the_future_is_not_sent() -> None:
    why = resendable({**_letter(ENVELOPE), "v": 99}, KEY)

    assert isinstance(why, str) and "upgrade onceonly" in why


def test_records_onceonly_never_writes_are_letters_with_nothing_to_send() -> None:
    for value in (b"not json", b"[1, 2]", None, b"\xff\xfe"):
        letter = parse_record(value)

        assert isinstance(resendable(letter, KEY), str)
    assert isinstance(resendable({"envelopes": "nope"}, KEY), str)
    assert isinstance(resendable({"envelopes": [5], "macs": ["x"]}, KEY), str)


def test_a_retry_note_names_only_what_are_ids() -> None:
    assert noted_letters({"letters": [1, "2", "x", None, 3.5]}) == [1, 2]
    assert noted_letters({"letters": "all"}) == []


def test_letters_of_a_worker_that_checks_macs_say_so() -> None:
    assert carries_macs(_letter(ENVELOPE))
    assert carries_macs({"check": "bad_mac"})
    assert not carries_macs(_letter(ENVELOPE, key=None))


def test_readmit_signs_with_the_new_secret_what_the_previous_one_verifies() -> None:
    letter = _letter(ENVELOPE, key=OLD)

    assert isinstance(resendable(letter, KEY), str)  # a retry leaves it open
    sent = readmittable(letter, None, current=KEY, previous=OLD, vouch=False)

    assert sent == [Resend(ENVELOPE, mac_of(ENVELOPE.encode(), KEY))]


def test_readmit_sends_a_letter_without_macs_only_when_vouched_for() -> None:
    letter = _letter(ENVELOPE, key=None)

    refused = readmittable(letter, None, current=KEY, previous=OLD, vouch=False)
    vouched = readmittable(letter, None, current=KEY, previous=None, vouch=True)

    assert isinstance(refused, str) and "--vouch" in refused
    assert isinstance(vouched, list) and vouched[0].mac == mac_of(ENVELOPE.encode(), KEY)


def test_readmit_of_a_bad_mac_letter_sends_the_deliveries_record_it_names() -> None:
    letter = {"check": "bad_mac", "partition": 0, "offset": 3, "value": "kept"}
    value = ENVELOPE.encode()

    rotated = readmittable(
        letter, Original(value, mac_of(value, OLD)), current=KEY, previous=OLD, vouch=False
    )
    forged = readmittable(
        letter, Original(value, b"0" * 64), current=KEY, previous=OLD, vouch=False
    )
    unsigned = readmittable(letter, Original(value, None), current=KEY, previous=None, vouch=True)
    gone = readmittable(letter, None, current=KEY, previous=OLD, vouch=False)

    assert isinstance(rotated, list) and rotated[0].mac == mac_of(value, KEY)
    assert isinstance(forged, str) and "verifies under neither" in forged
    assert unsigned == rotated
    assert isinstance(gone, str) and "no longer holds the record" in gone


def test_readmit_of_a_record_that_is_no_envelope_says_so() -> None:
    letter = {"check": "not_an_envelope", "partition": 0, "offset": 1}

    why = readmittable(letter, Original(b"null", None), current=KEY, previous=None, vouch=True)

    assert isinstance(why, str) and "not an envelope" in why


def test_every_check_a_letter_can_name_is_documented() -> None:
    from pathlib import Path

    from onceonly.schemas.dead_letter import Check

    docs = "".join(p.read_text() for p in Path(__file__).parents[3].joinpath("docs").glob("*.md"))

    assert [c.value for c in Check if f"`{c.value}`" not in docs] == []


def test_an_unreadable_letter_keeps_the_record_and_names_its_check() -> None:
    from onceonly.schemas.dead_letter import Check, unreadable_letter

    letter = unreadable_letter(b"\xffnot json", 3, 42, "not an envelope", Check.BAD_MAC)

    assert (letter["check"], letter["partition"], letter["offset"]) == ("bad_mac", 3, 42)
    assert letter["value"].endswith("not json")


def test_a_failure_letter_holds_the_envelopes_a_retry_sends_again() -> None:
    from onceonly.schemas.dead_letter import Check, failure_letter

    envelope = ENVELOPE
    letter = failure_letter([envelope], Check.FETCH_FAILED, "503", mac_key=b"k" * 32)

    assert letter["reason"] == "fetch_failed: 503" and letter["check"] == "fetch_failed"
    assert letter["envelopes"] == [envelope.to_json()]
    assert letter["macs"] == [mac_of(envelope.encode(), b"k" * 32).decode()]


def test_a_failed_replys_check_follows_its_reason() -> None:
    from onceonly.schemas.dead_letter import Check, reply_check

    assert reply_check("writer_failed: 3 attempts") is Check.WRITER_FAILED
    assert reply_check("the mail API refused: 422") is Check.SEND_FAILED

"""The providers' own published signature vectors, against our verification code.

Svix / Standard Webhooks: the vector of the svix and standard-webhooks libraries' own tests
(``msg_p5jXN8AQM9LWM0D4loKWxJek`` at 1614265330). GitHub: the example of its documentation
("Validating webhook deliveries"). None of these signatures is computed here: a test that
signed its own input with our code would pass however that code was broken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, tzinfo
from functools import partial

import pytest
import standardwebhooks.webhooks

from onceonly.ingest.exceptions import VerificationError
from onceonly.ingest.verify import VERIFIERS, verify_github, verify_standard, verify_svix

SVIX_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SVIX_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SVIX_TIMESTAMP = 1614265330  # 2021-02-25T15:02:10Z
SVIX_PAYLOAD = b'{"test": 2432232314}'
SVIX_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
#: the decoys of svix's multi-signature test: a wrong v1, an unknown scheme
SVIX_DECOYS = (
    "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
    "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
)

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

Verify = Callable[[bytes, Mapping[str, str], str], None]


def _svix_headers(signature: str) -> dict[str, str]:
    return {
        "svix-id": SVIX_ID,
        "svix-timestamp": str(SVIX_TIMESTAMP),
        "svix-signature": signature,
    }


def _standard_headers(signature: str) -> dict[str, str]:
    return {
        "webhook-id": SVIX_ID,
        "webhook-timestamp": str(SVIX_TIMESTAMP),
        "webhook-signature": signature,
    }


#: the time our verifiers are given, where a test moved it
_moved: dict[str, float] = {}


def _clock() -> float:
    return _moved.get("now", time.time())


SCHEMES = [
    pytest.param(partial(verify_svix, clock=_clock), _svix_headers, id="svix"),
    pytest.param(partial(verify_standard, clock=_clock), _standard_headers, id="standard-webhooks"),
]


def _clock_at(monkeypatch: pytest.MonkeyPatch, unix: float) -> None:
    """Move the verifiers' clock: the "now" ours checks the timestamp against, and the one
    that standardwebhooks (under svix too) checks it against again. Both tolerances are
    untouched."""

    class Clock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Clock:
            return cls.fromtimestamp(unix, tz=tz)

    monkeypatch.setattr(standardwebhooks.webhooks, "datetime", Clock)
    monkeypatch.setitem(_moved, "now", unix)


@pytest.fixture
def in_2021(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier's clock a few seconds after the vector was signed."""
    _clock_at(monkeypatch, SVIX_TIMESTAMP + 5)


def _check(verify: Verify, body: bytes, headers: Mapping[str, str], secret: str) -> str:
    with pytest.raises(VerificationError) as info:
        verify(body, headers, secret)
    return info.value.check


def _changed_last(text: str, to: str) -> str:
    assert text[-1] != to
    return text[:-1] + to


# ---- Svix / Standard Webhooks ----------------------------------------------------------


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
def test_the_published_vector_verifies(
    verify: Verify, headers: Callable[[str], dict[str, str]]
) -> None:
    verify(SVIX_PAYLOAD, headers(SVIX_SIGNATURE), SVIX_SECRET)


def test_these_are_the_verifiers_ingest_dispatches_to() -> None:
    assert VERIFIERS["svix"] is verify_svix
    assert VERIFIERS["standard"] is verify_standard
    assert VERIFIERS["github"] is verify_github


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
@pytest.mark.parametrize(
    "signature",
    [
        _changed_last(SVIX_SIGNATURE, "A"),  # the last character: "=" is now a digit
        SVIX_SIGNATURE[:-2] + "U=",  # the digest's last digit (E -> U)
        SVIX_SIGNATURE.replace("g0hM", "g0hN", 1),  # its first bytes
    ],
    ids=["last-character", "last-digit", "first-bytes"],
)
def test_the_vector_with_a_character_changed_is_refused(
    verify: Verify, headers: Callable[[str], dict[str, str]], signature: str
) -> None:
    assert _check(verify, SVIX_PAYLOAD, headers(signature), SVIX_SECRET) == "bad_signature"


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
@pytest.mark.parametrize(
    ("body", "msg_id", "secret"),
    [
        (b'{"test": 2432232315}', SVIX_ID, SVIX_SECRET),
        (SVIX_PAYLOAD + b" ", SVIX_ID, SVIX_SECRET),  # the raw bytes, not the JSON
        (SVIX_PAYLOAD, SVIX_ID[:-1] + "L", SVIX_SECRET),
        (SVIX_PAYLOAD, SVIX_ID, "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSx"),
    ],
    ids=["payload", "trailing-space", "id", "secret"],
)
def test_the_vector_with_anything_else_changed_is_refused(
    verify: Verify,
    headers: Callable[[str], dict[str, str]],
    body: bytes,
    msg_id: str,
    secret: str,
) -> None:
    values = headers(SVIX_SIGNATURE)
    id_header = next(name for name in values if name.endswith("-id"))
    values[id_header] = msg_id
    assert _check(verify, body, values, secret) == "bad_signature"


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
@pytest.mark.parametrize(
    "entries",
    [
        [*SVIX_DECOYS, SVIX_SIGNATURE, SVIX_DECOYS[0]],  # svix's own multi-signature case
        [SVIX_SIGNATURE, *SVIX_DECOYS],
        [*SVIX_DECOYS, SVIX_SIGNATURE],
    ],
    ids=["middle", "first", "last"],
)
def test_decoy_entries_beside_the_valid_one_pass(
    verify: Verify, headers: Callable[[str], dict[str, str]], entries: list[str]
) -> None:
    verify(SVIX_PAYLOAD, headers(" ".join(entries)), SVIX_SECRET)


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
def test_decoy_entries_alone_are_refused(
    verify: Verify, headers: Callable[[str], dict[str, str]]
) -> None:
    signature = " ".join(SVIX_DECOYS)
    assert _check(verify, SVIX_PAYLOAD, headers(signature), SVIX_SECRET) == "bad_signature"


@pytest.mark.usefixtures("in_2021")
@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
def test_the_valid_signature_under_another_scheme_is_refused(
    verify: Verify, headers: Callable[[str], dict[str, str]]
) -> None:
    signature = "v2," + SVIX_SIGNATURE.removeprefix("v1,")
    assert _check(verify, SVIX_PAYLOAD, headers(signature), SVIX_SECRET) == "bad_signature"


@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
@pytest.mark.parametrize("direction", [1, -1], ids=["clock-after", "clock-before"])
def test_the_tolerance_stays_5_minutes_on_the_moved_clock(
    monkeypatch: pytest.MonkeyPatch,
    verify: Verify,
    headers: Callable[[str], dict[str, str]],
    direction: int,
) -> None:
    _clock_at(monkeypatch, SVIX_TIMESTAMP + direction * 299)
    verify(SVIX_PAYLOAD, headers(SVIX_SIGNATURE), SVIX_SECRET)
    _clock_at(monkeypatch, SVIX_TIMESTAMP + direction * 301)
    assert (
        _check(verify, SVIX_PAYLOAD, headers(SVIX_SIGNATURE), SVIX_SECRET)
        == "timestamp_out_of_tolerance"
    )


@pytest.mark.parametrize(("verify", "headers"), SCHEMES)
def test_the_vector_is_refused_on_todays_clock(
    verify: Verify, headers: Callable[[str], dict[str, str]]
) -> None:
    """Its timestamp is from 2021: the tests above pass because they move the clock."""
    assert (
        _check(verify, SVIX_PAYLOAD, headers(SVIX_SIGNATURE), SVIX_SECRET)
        == "timestamp_out_of_tolerance"
    )


# ---- GitHub ----------------------------------------------------------------------------


def test_githubs_documented_example_verifies() -> None:
    verify_github(GITHUB_PAYLOAD, {"X-Hub-Signature-256": GITHUB_SIGNATURE}, GITHUB_SECRET)


@pytest.mark.parametrize(
    ("body", "signature", "secret"),
    [
        (GITHUB_PAYLOAD, _changed_last(GITHUB_SIGNATURE, "8"), GITHUB_SECRET),
        (GITHUB_PAYLOAD, GITHUB_SIGNATURE.replace("=75", "=85", 1), GITHUB_SECRET),
        (b"Hello, World?", GITHUB_SIGNATURE, GITHUB_SECRET),
        (GITHUB_PAYLOAD + b"\n", GITHUB_SIGNATURE, GITHUB_SECRET),
        (GITHUB_PAYLOAD, GITHUB_SIGNATURE, "It's a Secret to everybody"),
    ],
    ids=["last-character", "first-character", "payload", "trailing-newline", "secret"],
)
def test_githubs_example_with_a_character_changed_is_refused(
    body: bytes, signature: str, secret: str
) -> None:
    headers = {"X-Hub-Signature-256": signature}
    assert _check(verify_github, body, headers, secret) == "bad_signature"


def test_githubs_example_signature_under_sha1_is_refused() -> None:
    headers = {"X-Hub-Signature-256": "sha1=" + GITHUB_SIGNATURE.removeprefix("sha256=")}
    assert _check(verify_github, GITHUB_PAYLOAD, headers, GITHUB_SECRET) == "malformed_header"

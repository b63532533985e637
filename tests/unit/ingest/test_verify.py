"""onceonly.ingest.verify: each provider's signature scheme, over the raw body bytes.

Signatures are made with the providers' own signing code where they ship one:
``svix.webhooks.Webhook.sign``, ``standardwebhooks.Webhook.sign`` and stripe's
public test helper ``stripe.WebhookSignature.generate_signature_header``. Nylas
and GitHub ship no signer, so those use ``hmac`` as their docs describe.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
import standardwebhooks
import stripe
import svix.webhooks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from onceonly.foundation.errors import ConfigError
from onceonly.ingest.exceptions import VerificationError
from onceonly.ingest.verify import (
    VERIFIERS,
    Verifier,
    check_secret,
    verify_github,
    verify_nylas,
    verify_standard,
    verify_stripe,
    verify_svix,
)

BODY = '{"type":"message.received","event_id":"evt_1","text":"h\u00e9llo \u2603"}'.encode()
NOT_UTF8 = b'{"text":"\xff\xfe"}'

Sign = Callable[[bytes, str, datetime], dict[str, str]]


def _b64_secret(raw: bytes) -> str:
    return "whsec_" + base64.b64encode(raw).decode()


def _svix_sign(body: bytes, secret: str, at: datetime) -> dict[str, str]:
    signature = svix.webhooks.Webhook(secret).sign("msg_1", at, body.decode())
    return {
        "svix-id": "msg_1",
        "svix-timestamp": str(int(at.timestamp())),
        "svix-signature": signature,
    }


def _standard_sign(body: bytes, secret: str, at: datetime) -> dict[str, str]:
    signature = standardwebhooks.Webhook(secret).sign("msg_1", at, body.decode())
    return {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def _stripe_sign(body: bytes, secret: str, at: datetime) -> dict[str, str]:
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=int(at.timestamp())
    )
    return {"stripe-signature": header}


def _hex_hmac(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _nylas_sign(body: bytes, secret: str, at: datetime) -> dict[str, str]:
    return {"x-nylas-signature": _hex_hmac(body, secret)}


def _github_sign(body: bytes, secret: str, at: datetime) -> dict[str, str]:
    return {"x-hub-signature-256": "sha256=" + _hex_hmac(body, secret)}


@dataclass(frozen=True)
class Provider:
    name: str
    verify: Verifier
    sign: Sign
    secret: str
    other_secret: str
    malformed: tuple[dict[str, str], ...]  # header overrides that break the format

    def __str__(self) -> str:
        return self.name

    def signed(self, body: bytes = BODY, *, secret: str | None = None) -> dict[str, str]:
        return self.sign(body, secret or self.secret, datetime.now(UTC))


HEX = "ab" * 32
SVIX = Provider(
    "svix",
    verify_svix,
    _svix_sign,
    _b64_secret(b"agentmail-secret-0123456789abcdef"),
    _b64_secret(b"some-other-secret-0123456789abcd"),
    (
        {"svix-signature": "v1abc"},  # no comma
        {"svix-signature": "v1,a"},  # base64 with impossible padding
        {"svix-signature": "v1,a,b"},  # too many commas
        {"svix-timestamp": "yesterday"},
    ),
)
STANDARD = Provider(
    "standard",
    verify_standard,
    _standard_sign,
    _b64_secret(b"standard-secret-0123456789abcdef"),
    _b64_secret(b"another-secret-0123456789abcdef!"),
    (
        {"webhook-signature": "v1abc"},  # the library lets this escape as ValueError
        {"webhook-signature": "v1,a"},
        {"webhook-signature": "v1,a,b"},
        {"webhook-timestamp": "1e400"},
        {"webhook-timestamp": "yesterday"},
    ),
)
STRIPE = Provider(
    "stripe",
    verify_stripe,
    _stripe_sign,
    "whsec_stripe_test_secret",
    "whsec_stripe_other_secret",
    (
        {"stripe-signature": "garbage"},
        {"stripe-signature": "t=1700000000"},  # no v1= entry
        {"stripe-signature": "t=1700000000,v1=\u00e9"},  # non-ASCII: TypeError in the library
    ),
)
NYLAS = Provider(
    "nylas",
    verify_nylas,
    _nylas_sign,
    "nylas-webhook-secret",
    "nylas-other-secret",
    ({"x-nylas-signature": "zz" * 32}, {"x-nylas-signature": "ab" * 31}),
)
GITHUB = Provider(
    "github",
    verify_github,
    _github_sign,
    "github-webhook-secret",
    "github-other-secret",
    (
        {"x-hub-signature-256": HEX},
        {"x-hub-signature-256": "sha1=" + HEX},
        {"x-hub-signature-256": "sha256=" + "g" * 64},
    ),
)
PROVIDERS = (SVIX, STANDARD, STRIPE, NYLAS, GITHUB)
HEADER_NAMES = tuple(name for p in PROVIDERS for name in p.signed())
WITH_TIMESTAMP = (SVIX, STANDARD, STRIPE)


def _check(provider: Provider, headers: dict[str, str], body: bytes = BODY) -> str:
    with pytest.raises(VerificationError) as info:
        provider.verify(body, headers, provider.secret)
    return info.value.check


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_valid_delivery_passes(provider: Provider) -> None:
    provider.verify(BODY, provider.signed(), provider.secret)  # raises on failure


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_wrong_secret_is_bad_signature(provider: Provider) -> None:
    assert _check(provider, provider.signed(secret=provider.other_secret)) == "bad_signature"


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_tampered_body_is_bad_signature(provider: Provider) -> None:
    assert _check(provider, provider.signed(), BODY.replace(b"evt_1", b"evt_2")) == "bad_signature"


@pytest.mark.parametrize(
    ("provider", "header"),
    [(p, name) for p in PROVIDERS for name in p.signed()],
    ids=str,
)
def test_missing_header_is_missing_header(provider: Provider, header: str) -> None:
    headers = provider.signed()
    del headers[header]
    assert _check(provider, headers) == "missing_header"


@pytest.mark.parametrize(
    ("provider", "header"),
    [(p, name) for p in PROVIDERS for name in p.signed()],
    ids=str,
)
def test_empty_header_is_missing_header(provider: Provider, header: str) -> None:
    assert _check(provider, {**provider.signed(), header: " "}) == "missing_header"


@pytest.mark.parametrize(
    ("provider", "override"),
    [(p, bad) for p in PROVIDERS for bad in p.malformed],
    # ASCII ids: mutmut 3.7 cannot pass an escaped non-ASCII id back to pytest
    ids=lambda v: str(v) if isinstance(v, Provider) else ascii(v).replace("\\", "_"),
)
def test_malformed_header_is_malformed_header(provider: Provider, override: dict[str, str]) -> None:
    assert _check(provider, {**provider.signed(), **override}) == "malformed_header"


@pytest.mark.parametrize("provider", WITH_TIMESTAMP, ids=str)
@pytest.mark.parametrize("offset", [timedelta(minutes=-10), timedelta(minutes=10)], ids=str)
def test_timestamp_ten_minutes_off_is_out_of_tolerance(
    provider: Provider, offset: timedelta
) -> None:
    headers = provider.sign(BODY, provider.secret, datetime.now(UTC) + offset)
    assert _check(provider, headers) == "timestamp_out_of_tolerance"


def test_stripe_200s_old_signature_passes_at_tolerance_300() -> None:
    headers = _stripe_sign(BODY, STRIPE.secret, datetime.now(UTC) - timedelta(seconds=200))
    verify_stripe(BODY, headers, STRIPE.secret, tolerance_s=300)  # raises on failure


def test_stripe_200s_old_signature_fails_at_tolerance_100() -> None:
    headers = _stripe_sign(BODY, STRIPE.secret, datetime.now(UTC) - timedelta(seconds=200))
    with pytest.raises(VerificationError) as info:
        verify_stripe(BODY, headers, STRIPE.secret, tolerance_s=100)
    assert info.value.check == "timestamp_out_of_tolerance"


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_non_utf8_body_is_body_not_utf8(provider: Provider) -> None:
    headers = provider.signed()
    if provider in (NYLAS, GITHUB):  # these sign raw bytes, so sign the bad body itself
        headers = provider.sign(NOT_UTF8, provider.secret, datetime.now(UTC))
    assert _check(provider, headers, NOT_UTF8) == "body_not_utf8"


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_header_names_are_case_insensitive_in_a_plain_dict(provider: Provider) -> None:
    headers = {name.title(): value for name, value in provider.signed().items()}
    provider.verify(BODY, headers, provider.secret)  # raises on failure


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_header_names_are_case_insensitive_in_aiohttp_headers(provider: Provider) -> None:
    headers = CIMultiDictProxy(CIMultiDict({k.upper(): v for k, v in provider.signed().items()}))
    provider.verify(BODY, headers, provider.secret)  # raises on failure


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_messages_name_the_check_but_not_the_secret_or_signature(provider: Provider) -> None:
    good = provider.signed()
    attempts = [
        provider.signed(secret=provider.other_secret),
        {**good, **provider.malformed[0]},
        {},
    ]
    for headers in attempts:
        with pytest.raises(VerificationError) as info:
            provider.verify(BODY, headers, provider.secret)
        message = str(info.value)
        assert info.value.check in message
        for secret in (provider.secret, provider.other_secret):
            assert secret.removeprefix("whsec_") not in message
        for value in headers.values():  # base64 or hex signatures
            for token in re.findall(r"[A-Za-z0-9+/]{20,}", value):
                assert token not in message


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_empty_secret_is_a_config_error(provider: Provider) -> None:
    with pytest.raises(ConfigError):
        provider.verify(BODY, provider.signed(), " ")


@pytest.mark.parametrize("provider", [SVIX, STANDARD], ids=str)
def test_secret_that_is_not_base64_is_a_config_error(provider: Provider) -> None:
    with pytest.raises(ConfigError, match="not base64"):
        provider.verify(BODY, provider.signed(), "whsec_a")


def test_stripe_tolerance_below_one_second_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        verify_stripe(BODY, STRIPE.signed(), STRIPE.secret, tolerance_s=0)


def test_registry_holds_every_verifier_and_partial_sets_stripe_tolerance() -> None:
    assert set(VERIFIERS) == {p.name for p in PROVIDERS}
    strict: Verifier = partial(verify_stripe, tolerance_s=100)
    old = _stripe_sign(BODY, STRIPE.secret, datetime.now(UTC) - timedelta(seconds=200))
    VERIFIERS["stripe"](BODY, old, STRIPE.secret)  # default tolerance 300 s: passes
    with pytest.raises(VerificationError):
        strict(BODY, old, STRIPE.secret)


# --- property: only VerificationError ever escapes ----------------------------

# aiohttp decodes header bytes with surrogateescape, so lone surrogates are possible.
_any_text = st.text(st.characters(exclude_categories=()), max_size=60)
_now_ish = st.integers(-(10**6), 10**6).map(lambda d: str(int(time.time()) + d))
_entry = st.one_of(
    st.from_regex(r"(t|v1|v0|sha256|msg)[=,]?[\w+/=. \u00e9\ud800-]{0,70}", fullmatch=True),
    _now_ish.map("t={}".format),
    st.tuples(st.sampled_from(["v1=", "v1,", "sha256="]), _any_text).map("".join),
)
_shaped = st.tuples(st.lists(_entry, min_size=1, max_size=3), st.sampled_from(", ")).map(
    lambda parts: parts[1].join(parts[0])
)
_values = st.one_of(_any_text, _now_ish, _shaped, st.integers().map(str), st.floats().map(str))
_bodies = st.one_of(st.just(BODY), st.binary(max_size=200), st.text(max_size=200).map(str.encode))


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start_valid=st.booleans(), body=_bodies, data=st.data())
def test_only_verification_error_escapes(
    provider: Provider, start_valid: bool, body: bytes, data: st.DataObject
) -> None:
    own = st.sampled_from(list(provider.signed()))
    names = st.one_of(own, own.map(str.upper), st.sampled_from(HEADER_NAMES), _any_text)
    overrides = data.draw(st.dictionaries(names, _values, max_size=6), label="overrides")
    headers = {**(provider.signed() if start_valid else {}), **overrides}
    with contextlib.suppress(VerificationError):
        provider.verify(body, headers, provider.secret)


# -- what a rejection says: the provider, the check and the header, exactly -------------


def _rejection(provider: Provider, headers: dict[str, str], body: bytes = BODY) -> str:
    with pytest.raises(VerificationError) as info:
        provider.verify(body, headers, provider.secret)
    return str(info.value).split("; ")[0]


FUTURE = datetime.now(UTC) + timedelta(hours=1)


@pytest.mark.parametrize(
    ("provider", "headers", "message"),
    [
        (
            SVIX,
            lambda: SVIX.signed(secret=SVIX.other_secret),
            "AgentMail (Svix) webhook rejected (bad_signature): "
            "svix-signature: no v1 signature matches the body",
        ),
        (
            STANDARD,
            lambda: STANDARD.signed(secret=STANDARD.other_secret),
            "Standard Webhooks webhook rejected (bad_signature): "
            "webhook-signature: no v1 signature matches the body",
        ),
        (
            SVIX,
            lambda: {**SVIX.signed(), "svix-id": ""},
            "AgentMail (Svix) webhook rejected (missing_header): "
            "header svix-id is missing or empty",
        ),
        (
            STANDARD,
            lambda: {**STANDARD.signed(), "webhook-id": ""},
            "Standard Webhooks webhook rejected (missing_header): "
            "header webhook-id is missing or empty",
        ),
        (
            STRIPE,
            lambda: _stripe_sign(BODY, STRIPE.secret, FUTURE),
            "Stripe webhook rejected (timestamp_out_of_tolerance): t= is in the future",
        ),
        (
            STRIPE,
            lambda: STRIPE.signed(secret=STRIPE.other_secret),
            "Stripe webhook rejected (bad_signature): "
            "stripe-signature: no v1 signature matches the body",
        ),
        (
            STRIPE,
            lambda: {},
            "Stripe webhook rejected (missing_header): header stripe-signature is missing or empty",
        ),
        (
            NYLAS,
            lambda: NYLAS.signed(secret=NYLAS.other_secret),
            "Nylas webhook rejected (bad_signature): x-nylas-signature does not match the body",
        ),
        (
            NYLAS,
            lambda: {"x-nylas-signature": "ab"},
            "Nylas webhook rejected (malformed_header): x-nylas-signature is not 64 hex digits",
        ),
        (
            NYLAS,
            lambda: {},
            "Nylas webhook rejected (missing_header): header x-nylas-signature is missing or empty",
        ),
        (
            GITHUB,
            lambda: GITHUB.signed(secret=GITHUB.other_secret),
            "GitHub webhook rejected (bad_signature): x-hub-signature-256 does not match the body",
        ),
        (
            GITHUB,
            lambda: {"x-hub-signature-256": "sha1=" + HEX},
            "GitHub webhook rejected (malformed_header): "
            "x-hub-signature-256 does not start sha256=",
        ),
        (
            GITHUB,
            lambda: {"x-hub-signature-256": "sha256=ab=cd"},
            "GitHub webhook rejected (malformed_header): x-hub-signature-256 is not 64 hex digits",
        ),
        (
            GITHUB,
            lambda: {},
            "GitHub webhook rejected (missing_header): "
            "header x-hub-signature-256 is missing or empty",
        ),
    ],
    ids=lambda v: v.split(":")[0].split(" (")[-1] if isinstance(v, str) else None,
)
def test_a_rejection_names_the_provider_the_check_and_the_header(
    provider: Provider, headers: Callable[[], dict[str, str]], message: str
) -> None:
    assert _rejection(provider, headers()) == message


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_a_body_that_is_not_utf8_is_rejected_naming_the_provider(provider: Provider) -> None:
    name = {"svix": "AgentMail (Svix)", "standard": "Standard Webhooks"}.get(
        provider.name, provider.name.capitalize().replace("Github", "GitHub")
    )
    message = _rejection(provider, provider.signed(), NOT_UTF8)
    assert message == f"{name} webhook rejected (body_not_utf8): the body is not valid UTF-8"


@pytest.mark.parametrize(
    ("provider", "name"),
    [
        (SVIX, "AgentMail (Svix)"),
        (STANDARD, "Standard Webhooks"),
        (STRIPE, "Stripe"),
        (NYLAS, "Nylas"),
        (GITHUB, "GitHub"),
    ],
    ids=str,
)
def test_an_empty_secret_is_a_config_error_naming_the_provider(
    provider: Provider, name: str
) -> None:
    with pytest.raises(ConfigError) as info:
        provider.verify(BODY, provider.signed(), " ")
    assert str(info.value) == f"the {name} webhook secret is empty; configure its signing secret"


def test_a_signed_standard_webhook_body_that_is_not_json_still_verifies() -> None:
    body = b"plain text, not JSON"
    verify_standard(body, STANDARD.signed(body), STANDARD.secret)


@pytest.mark.parametrize("kind", ["svix", "standard"])
def test_check_secret_refuses_a_svix_or_standard_secret_that_is_not_base64(kind: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_secret(kind, "whsec_not*base64")
    assert str(info.value) == (
        f"the {kind} webhook secret is not base64 (whsec_...); "
        "copy the endpoint's signing secret from the provider's dashboard"
    )


@pytest.mark.parametrize("kind", ["stripe", "nylas", "github"])
def test_check_secret_refuses_an_empty_secret_naming_its_kind(kind: str) -> None:
    with pytest.raises(ConfigError, match=f"^the {kind} webhook secret is empty"):
        check_secret(kind, "")


def test_a_stripe_tolerance_of_one_second_is_allowed() -> None:
    verify_stripe(BODY, STRIPE.signed(), STRIPE.secret, tolerance_s=1)


def test_a_stripe_tolerance_below_one_second_says_what_it_got() -> None:
    with pytest.raises(ConfigError) as info:
        verify_stripe(BODY, STRIPE.signed(), STRIPE.secret, tolerance_s=0)
    assert str(info.value) == "the Stripe tolerance must be at least 1 s, got 0"


def test_a_stripe_timestamp_301_s_ahead_is_refused_at_the_default_tolerance() -> None:
    ahead = datetime.fromtimestamp(int(time.time()) + 301, tz=UTC)
    assert _check(STRIPE, _stripe_sign(BODY, STRIPE.secret, ahead)) == "timestamp_out_of_tolerance"


def test_a_stripe_t_item_with_more_equals_signs_is_read_as_stripe_reads_it() -> None:
    stamp = str(int(time.time()))
    signature = _hex_hmac(f"{stamp}.".encode() + BODY, STRIPE.secret)
    verify_stripe(BODY, {"stripe-signature": f"t={stamp}=x=y,v1={signature}"}, STRIPE.secret)


# -- the checks are ours: the libraries' wording decides nothing -------------------------


def _reworded(base: type[Exception]) -> type[Exception]:
    """``base`` raised with a text no table could know; its other arguments kept."""

    def init(self: Exception, message: object, *args: object, **kwargs: object) -> None:
        base.__init__(self, "a wording of a newer version", *args, **kwargs)

    return type(f"Reworded{base.__name__}", (base,), {"__init__": init})


@pytest.fixture
def reworded_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The libraries raise their own exception types as before, but with other messages:
    what svix 2.9.1 did to the messages of the same headers."""
    import standardwebhooks.webhooks

    monkeypatch.setattr(
        standardwebhooks.webhooks,
        "WebhookVerificationError",
        _reworded(standardwebhooks.webhooks.WebhookVerificationError),
    )
    webhook_module = sys.modules[stripe.WebhookSignature.__module__]
    monkeypatch.setattr(
        webhook_module,
        "SignatureVerificationError",
        _reworded(stripe.SignatureVerificationError),
    )


_EVERY_CASE = [
    *[(p, bad, "malformed_header") for p in PROVIDERS for bad in p.malformed],
    *[(p, "other secret", "bad_signature") for p in PROVIDERS],
    *[(p, "10 minutes old", "timestamp_out_of_tolerance") for p in WITH_TIMESTAMP],
    *[(p, "10 minutes ahead", "timestamp_out_of_tolerance") for p in WITH_TIMESTAMP],
]


def _case_headers(provider: Provider, case: dict[str, str] | str) -> dict[str, str]:
    if isinstance(case, dict):
        return {**provider.signed(), **case}
    if case == "other secret":
        return provider.signed(secret=provider.other_secret)
    offset = timedelta(minutes=-10 if case.endswith("old") else 10)
    return provider.sign(BODY, provider.secret, datetime.now(UTC) + offset)


@pytest.mark.usefixtures("reworded_libraries")
@pytest.mark.parametrize(
    ("provider", "case", "check"),
    _EVERY_CASE,
    ids=lambda v: str(v) if isinstance(v, Provider) else ascii(v).replace("\\", "_"),
)
def test_every_check_stands_when_the_libraries_reword_their_errors(
    provider: Provider, case: dict[str, str] | str, check: str
) -> None:
    assert _check(provider, _case_headers(provider, case)) == check


@pytest.mark.usefixtures("reworded_libraries")
@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_a_valid_delivery_still_passes_when_the_libraries_reword_their_errors(
    provider: Provider,
) -> None:
    provider.verify(BODY, provider.signed(), provider.secret)  # raises on failure


def test_a_signed_svix_body_that_is_not_json_still_verifies() -> None:
    """Only the signature is the library's to judge: svix 1.x parsed the body as JSON after
    a match and raised on any other body."""
    body = b"plain text, not JSON"
    verify_svix(body, SVIX.signed(body), SVIX.secret)


@pytest.mark.parametrize(
    ("provider", "clock"),
    [(p, offset) for p in WITH_TIMESTAMP for offset in (-301, 301)],
    ids=str,
)
def test_the_timestamp_is_checked_against_the_clock_the_verifier_is_given(
    provider: Provider, clock: int
) -> None:
    headers = provider.signed()
    now = time.time()
    provider.verify(BODY, headers, provider.secret)  # type: ignore[call-arg]
    verify = partial(provider.verify, clock=lambda: now + clock)  # type: ignore[call-arg]
    with pytest.raises(VerificationError) as info:
        verify(BODY, headers, provider.secret)
    assert info.value.check == "timestamp_out_of_tolerance"

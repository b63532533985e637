"""Webhook signature verification over the raw request bytes.

Pure functions: no I/O, no logging, no environment reads. Each ``verify_*``
returns ``None`` when the delivery is authentic and raises
:class:`~onceonly.ingest.exceptions.VerificationError` otherwise; whatever the providers'
libraries raise on hostile input is mapped to one at a single seam
(:func:`_library_seam`). Headers may be any ``Mapping[str, str]`` and are looked
up case-insensitively. Secrets arrive as plain ``str`` and are never put in a
message, nor are signatures.

An unusable *secret* (empty, or not base64 for Svix / Standard Webhooks) is our
misconfiguration, not the sender's fault, so it raises
:class:`~onceonly.foundation.errors.ConfigError` instead.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from types import MappingProxyType
from typing import TypeVar

import standardwebhooks
import stripe
import svix.webhooks
from standardwebhooks.webhooks import EmptyWebhookSecretError

from onceonly.foundation.errors import ConfigError
from onceonly.ingest.exceptions import VerificationCheck, VerificationError

#: Every ``verify_*`` fits this shape (``verify_stripe``'s tolerance has a default).
Verifier = Callable[[bytes, Mapping[str, str], str], None]

_W = TypeVar("_W")

_HINTS: dict[VerificationCheck, str] = {
    "missing_header": "the request is not from this provider, or a proxy strips the header",
    "malformed_header": "the header is not in the provider's format; the request is not "
    "from this provider or was altered in transit",
    "bad_signature": "check that the configured secret is this endpoint's signing secret "
    "and that nothing re-encodes the body before onceonly",
    "timestamp_out_of_tolerance": "check this host's clock (NTP); an old timestamp may "
    "also be a replayed delivery",
    "body_not_utf8": "providers send UTF-8 JSON; the body is not from the provider or "
    "was altered in transit",
}

#: Standard Webhooks (and Svix): ``webhook-timestamp`` is integer seconds since the epoch;
#: ``webhook-signature`` is space-separated ``<version>,<base64>`` entries, ``v1`` being
#: HMAC-SHA256 and others (``v1a``: ed25519) passed over.
_DECIMAL_SECONDS = re.compile(r"[0-9]{1,18}")
_VERSION = re.compile(r"v[0-9]+[a-z]?")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
#: Standard Webhooks' and Stripe's tolerance either side of now, fixed in their libraries.
TOLERANCE_S = 300

_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _fail(check: VerificationCheck, provider: str, detail: str) -> VerificationError:
    return VerificationError(
        check, f"{provider} webhook rejected ({check}): {detail}; {_HINTS[check]}"
    )


#: What the signature libraries raise for a signature that does not match: each library's
#: own class (svix 1.x defined one of its own; 2.x re-exports standardwebhooks').
_LIBRARY_MISMATCH: tuple[type[Exception], ...] = tuple(
    {
        standardwebhooks.WebhookVerificationError,
        svix.webhooks.WebhookVerificationError,
        stripe.SignatureVerificationError,
    }
)


@contextmanager
def _library_seam(provider: str, header: str, scheme: str) -> Iterator[None]:
    """The one place where the libraries' verification errors become VerificationError.

    Every header has been parsed and its timestamp checked by the time a library is
    called, so the library decides one thing only, whether a signature matches: whatever
    it raises is ``bad_signature``, by its type, never by its message text. ``from
    None`` on purpose: the library exceptions carry the signature header.
    """
    try:
        yield
    except _LIBRARY_MISMATCH:
        raise _fail(
            "bad_signature", provider, f"{header}: no {scheme} signature matches the body"
        ) from None


def _header(headers: Mapping[str, str], name: str, provider: str) -> str:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    if value is None or not value.strip():
        raise _fail("missing_header", provider, f"header {name} is missing or empty")
    return value


def _text(body: bytes, provider: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("body_not_utf8", provider, "the body is not valid UTF-8") from None


def _require_secret(secret: str, provider: str) -> None:
    if not secret.strip():
        raise ConfigError(f"the {provider} webhook secret is empty; configure its signing secret")


@lru_cache(maxsize=64)
def _webhook(factory: Callable[[str], _W], secret: str, provider: str) -> _W:
    """The library's verifier of ``secret``, built once: it base64-decodes the secret."""
    _require_secret(secret, provider)
    try:
        return factory(secret)
    except (ValueError, EmptyWebhookSecretError):  # binascii.Error is a ValueError
        raise ConfigError(
            f"the {provider} webhook secret is not base64 (whsec_...); "
            "copy the endpoint's signing secret from the provider's dashboard"
        ) from None


def check_secret(kind: str, secret: str) -> None:
    """Raise ConfigError at start-up for a secret that could never verify a delivery."""
    if kind in ("svix", "standard"):
        _webhook(standardwebhooks.Webhook, secret, kind)
    else:
        _require_secret(secret, kind)


def _check_timestamp(stamp: int, now: float, provider: str, header: str) -> None:
    if stamp < now - TOLERANCE_S:
        raise _fail("timestamp_out_of_tolerance", provider, f"{header} is too old")
    if stamp > now + TOLERANCE_S:
        raise _fail("timestamp_out_of_tolerance", provider, f"{header} is in the future")


def _webhook_signature_entries(value: str, provider: str, header: str) -> list[str]:
    """The ``v1`` signatures of a Standard Webhooks signature header, each checked for form.

    Every entry must be ``<version>,<base64>``: one comma, padded standard base64.
    """
    v1: list[str] = []
    for entry in value.split():
        version, comma, signature = entry.partition(",")
        if not comma or not _VERSION.fullmatch(version) or not signature:
            raise _fail("malformed_header", provider, f"{header} has an entry not <version>,<sig>")
        if not _BASE64.fullmatch(signature):
            raise _fail("malformed_header", provider, f"{header} has a signature not in base64")
        if version == "v1":
            v1.append(signature)
    return v1


def _webhook_headers(
    headers: Mapping[str, str], prefix: str, provider: str, now: float
) -> dict[str, str]:
    """The id, timestamp and signature headers of Svix / Standard Webhooks, checked for form
    and the timestamp for tolerance, before any library sees them."""
    names = (f"{prefix}-id", f"{prefix}-timestamp", f"{prefix}-signature")
    values = {name: _header(headers, name, provider) for name in names}
    for name, value in values.items():
        try:  # the libraries sign the id as UTF-8; a lone surrogate made standardwebhooks
            value.encode()  # 1.x raise UnicodeEncodeError, not its verification error
        except UnicodeEncodeError:
            raise _fail("malformed_header", provider, f"{name} is not valid UTF-8") from None
    stamp_header, signature_header = names[1], names[2]
    stamp = values[stamp_header].strip()
    if not _DECIMAL_SECONDS.fullmatch(stamp):
        raise _fail("malformed_header", provider, f"{stamp_header} is not whole seconds")
    if not _webhook_signature_entries(values[signature_header], provider, signature_header):
        raise _fail("bad_signature", provider, f"{signature_header} has no v1 signature")
    _check_timestamp(int(stamp), now, provider, stamp_header)
    return values


def verify_svix(
    body: bytes, headers: Mapping[str, str], secret: str, *, clock: Callable[[], float] = time.time
) -> None:
    """AgentMail deliveries, signed by Svix: ``svix-id``, ``svix-timestamp``, ``svix-signature``.

    The headers' form and the timestamp (5 minutes either side of ``clock()``, as Svix
    fixes it) are checked here; the signature by ``svix.webhooks.Webhook``.
    """
    provider = "AgentMail (Svix)"
    webhook = _webhook(svix.webhooks.Webhook, secret, provider)
    values = _webhook_headers(headers, "svix", provider, clock())
    text = _text(body, provider)
    with _library_seam(provider, "svix-signature", "v1"):
        webhook.verify(text, values)


def verify_standard(
    body: bytes, headers: Mapping[str, str], secret: str, *, clock: Callable[[], float] = time.time
) -> None:
    """Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

    The headers' form and the timestamp (5 minutes either side of ``clock()``) are checked
    here; the signature by ``standardwebhooks.Webhook``.
    """
    provider = "Standard Webhooks"
    webhook = _webhook(standardwebhooks.Webhook, secret, provider)
    values = _webhook_headers(headers, "webhook", provider, clock())
    text = _text(body, provider)
    with _library_seam(provider, "webhook-signature", "v1"):
        webhook.verify(text, values, json_parse=False)


def _stripe_timestamp(value: str, provider: str) -> int:
    """``t=<unix>`` of a ``Stripe-Signature`` header, checked for its documented form:
    comma-separated ``key=value`` items, the first ``t`` whole seconds, at least one ``v1``
    of 64 hex digits. Items are read as stripe reads them: the value ends at any second
    ``=``."""
    items = [item.split("=", 2) for item in value.split(",")]
    if any(len(item) < 2 for item in items):
        raise _fail("malformed_header", provider, "stripe-signature has an item not key=value")
    stamp = next((item[1] for item in items if item[0] == "t"), None)
    if stamp is None or not _DECIMAL_SECONDS.fullmatch(stamp):
        raise _fail("malformed_header", provider, "stripe-signature has no t= of whole seconds")
    v1 = [item[1] for item in items if item[0] == "v1"]
    if not v1 or not all(_HEX_SHA256.fullmatch(signature) for signature in v1):
        raise _fail("malformed_header", provider, "stripe-signature has no v1= of 64 hex digits")
    return int(stamp)


def verify_stripe(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance_s: int = TOLERANCE_S,
    clock: Callable[[], float] = time.time,
) -> None:
    """Stripe: ``Stripe-Signature: t=<unix>,v1=<hex hmac>``; the signature checked by stripe's
    own library.

    The header's form and its timestamp are checked here: ``tolerance_s`` (default 300 s)
    either side of ``clock()``; stripe's library alone would accept any future timestamp.
    ``tolerance_s`` must be positive.
    """
    provider = "Stripe"
    _require_secret(secret, provider)
    if tolerance_s < 1:
        raise ConfigError(f"the Stripe tolerance must be at least 1 s, got {tolerance_s}")
    header = _header(headers, "stripe-signature", provider)
    stamp = _stripe_timestamp(header, provider)
    now = clock()
    if stamp < now - tolerance_s:
        raise _fail("timestamp_out_of_tolerance", provider, "t= is too old")
    if stamp > now + tolerance_s:
        raise _fail("timestamp_out_of_tolerance", provider, "t= is in the future")
    text = _text(body, provider)
    with _library_seam(provider, "stripe-signature", "v1"):
        # tolerance None: the time was checked above against the same clock as the rest
        stripe.WebhookSignature.verify_header(text, header, secret, None)


def _verify_hex_hmac(
    body: bytes, secret: str, signature_hex: str, provider: str, header: str
) -> None:
    """Compare a hex HMAC-SHA256 of the raw body, keyed by the UTF-8 secret, in constant time."""
    if not _HEX_SHA256.fullmatch(signature_hex):
        raise _fail("malformed_header", provider, f"{header} is not 64 hex digits")
    _text(body, provider)
    expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()
    if not hmac.compare_digest(bytes.fromhex(signature_hex), expected):
        raise _fail("bad_signature", provider, f"{header} does not match the body")


def verify_nylas(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """Nylas: ``X-Nylas-Signature`` is the hex HMAC-SHA256 of the raw body. No timestamp."""
    _require_secret(secret, "Nylas")
    signature = _header(headers, "x-nylas-signature", "Nylas")
    _verify_hex_hmac(body, secret, signature, "Nylas", "x-nylas-signature")


def verify_github(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``. No timestamp."""
    _require_secret(secret, "GitHub")
    value = _header(headers, "x-hub-signature-256", "GitHub")
    scheme, _, signature = value.partition("=")
    if scheme != "sha256":
        raise _fail("malformed_header", "GitHub", "x-hub-signature-256 does not start sha256=")
    _verify_hex_hmac(body, secret, signature, "GitHub", "x-hub-signature-256")


#: Verifiers by scheme name; wrap ``verify_stripe`` in ``functools.partial`` for
#: a tolerance other than 300 s.
VERIFIERS: Mapping[str, Verifier] = MappingProxyType(
    {
        "svix": verify_svix,
        "standard": verify_standard,
        "stripe": verify_stripe,
        "nylas": verify_nylas,
        "github": verify_github,
    }
)

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

# Messages of svix / standardwebhooks' WebhookVerificationError and of
# stripe.SignatureVerificationError (stripe 16.x), by prefix.
_LIBRARY_MESSAGES: tuple[tuple[str, VerificationCheck], ...] = (
    ("Missing required headers", "missing_header"),
    ("Invalid Signature Headers", "malformed_header"),
    ("Message timestamp too old", "timestamp_out_of_tolerance"),
    ("Message timestamp too new", "timestamp_out_of_tolerance"),
    ("No matching signature found", "bad_signature"),
    ("No Stripe-Signature header value", "missing_header"),
    ("Unable to extract timestamp and signatures", "malformed_header"),
    ("No signatures found with expected scheme", "malformed_header"),
    ("No signatures found matching the expected signature", "bad_signature"),
    ("Timestamp outside the tolerance zone", "timestamp_out_of_tolerance"),
)

_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _fail(check: VerificationCheck, provider: str, detail: str) -> VerificationError:
    return VerificationError(
        check, f"{provider} webhook rejected ({check}): {detail}; {_HINTS[check]}"
    )


@contextmanager
def _library_seam(provider: str, header: str) -> Iterator[None]:
    """The one place where third-party verification errors become VerificationError.

    ``from None`` on purpose: the library exceptions carry the signature header.
    """
    try:
        yield
    except (standardwebhooks.WebhookVerificationError, stripe.SignatureVerificationError) as exc:
        message = str(getattr(exc, "user_message", None) or exc)
        known = [(p, c) for p, c in _LIBRARY_MESSAGES if message.startswith(p)]
        reason, check = known[0] if known else ("did not verify", "bad_signature")
        raise _fail(check, provider, f"{header}: {reason}") from None
    except (ValueError, TypeError, LookupError, ArithmeticError):
        # e.g. "v1abc" (no comma), bad base64, non-ASCII signature, huge timestamp
        raise _fail("malformed_header", provider, f"{header} could not be parsed") from None


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


def _id_timestamp_signature(
    headers: Mapping[str, str], prefix: str, provider: str
) -> dict[str, str]:
    names = (f"{prefix}-id", f"{prefix}-timestamp", f"{prefix}-signature")
    return {name: _header(headers, name, provider) for name in names}


def verify_svix(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """AgentMail deliveries, signed by Svix: ``svix-id``, ``svix-timestamp``, ``svix-signature``.

    Cryptography by ``svix.webhooks.Webhook``. Its tolerance is fixed at 5 minutes
    either side of now and cannot be changed.
    """
    provider = "AgentMail (Svix)"
    webhook = _webhook(svix.webhooks.Webhook, secret, provider)
    values = _id_timestamp_signature(headers, "svix", provider)
    text = _text(body, provider)
    with _library_seam(provider, "svix-signature/svix-timestamp"):
        webhook.verify(text, values)


def verify_standard(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

    Cryptography by ``standardwebhooks.Webhook``; tolerance fixed at 5 minutes
    either side of now.
    """
    provider = "Standard Webhooks"
    webhook = _webhook(standardwebhooks.Webhook, secret, provider)
    values = _id_timestamp_signature(headers, "webhook", provider)
    text = _text(body, provider)
    with _library_seam(provider, "webhook-signature/webhook-timestamp"):
        webhook.verify(text, values, json_parse=False)


def verify_stripe(
    body: bytes, headers: Mapping[str, str], secret: str, *, tolerance_s: int = 300
) -> None:
    """Stripe: ``Stripe-Signature: t=<unix>,v1=<hex hmac>`` checked by stripe's own library.

    ``stripe.WebhookSignature.verify_header`` only rejects timestamps older than
    ``tolerance_s`` (default 300 s); we also reject those more than ``tolerance_s``
    in the future, like Svix. ``tolerance_s`` must be positive (0 would disable
    stripe's check).
    """
    provider = "Stripe"
    _require_secret(secret, provider)
    if tolerance_s < 1:
        raise ConfigError(f"the Stripe tolerance must be at least 1 s, got {tolerance_s}")
    header = _header(headers, "stripe-signature", provider)
    text = _text(body, provider)
    with _library_seam(provider, "stripe-signature"):
        stripe.WebhookSignature.verify_header(text, header, secret, tolerance_s)
        # Parsed as stripe parses it: the first "t" item, up to any second "=".
        items = [item.split("=", 2) for item in header.split(",")]
        stamp = next((item[1] for item in items if item[0] == "t"), "")
        if int(stamp) > time.time() + tolerance_s:
            raise _fail("timestamp_out_of_tolerance", provider, "t= is in the future")


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

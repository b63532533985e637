"""Sign test deliveries with the providers' own code (svix, standardwebhooks, stripe).

Nylas and GitHub publish no signing helper; their HMACs follow their docs.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import standardwebhooks
import stripe
import svix.webhooks

SVIX_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 random bytes
STANDARD_SECRET = "whsec_" + "dGVzdC1zdGFuZGFyZC1zZWNyZXQtMDEyMzQ1Ng=="
STRIPE_SECRET = "whsec_stripe_test_secret"
NYLAS_SECRET = "nylas-webhook-secret"
GITHUB_SECRET = "github-webhook-secret"


def svix_headers(
    body: bytes, *, secret: str = SVIX_SECRET, msg_id: str | None = None, at: datetime | None = None
) -> dict[str, str]:
    return _id_timestamp_signature("svix", svix.webhooks.Webhook(secret).sign, body, msg_id, at)


def standard_headers(
    body: bytes,
    *,
    secret: str = STANDARD_SECRET,
    msg_id: str | None = None,
    at: datetime | None = None,
) -> dict[str, str]:
    sign = standardwebhooks.Webhook(secret).sign
    return _id_timestamp_signature("webhook", sign, body, msg_id, at)


def _id_timestamp_signature(
    prefix: str,
    sign: Callable[[str, datetime, str], str],
    body: bytes,
    msg_id: str | None,
    at: datetime | None,
) -> dict[str, str]:
    """Svix's scheme, which Standard Webhooks took over: ``<prefix>-id``, ``-timestamp``
    and ``-signature`` headers, ``sign`` given the id, the time and the body."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    at = at or datetime.now(UTC)
    return {
        f"{prefix}-id": msg_id,
        f"{prefix}-timestamp": str(int(at.timestamp())),
        f"{prefix}-signature": sign(msg_id, at, body.decode()),
        "content-type": "application/json",
    }


def stripe_headers(
    body: bytes, *, secret: str = STRIPE_SECRET, at: float | None = None
) -> dict[str, str]:
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=int(at if at is not None else time.time())
    )
    return {"Stripe-Signature": header, "content-type": "application/json"}


def nylas_headers(body: bytes, *, secret: str = NYLAS_SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Nylas-Signature": digest, "content-type": "application/json"}


def github_headers(
    body: bytes, *, secret: str = GITHUB_SECRET, delivery: str | None = None, event: str = "issues"
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Event": event,
        "content-type": "application/json",
    }


def provider_secrets() -> dict[str, object]:
    """Settings overrides that configure all five providers with the secrets above."""
    from pydantic import SecretStr

    return {
        "agentmail_webhook_secret": SecretStr(SVIX_SECRET),
        "nylas_webhook_secret": SecretStr(NYLAS_SECRET),
        "stripe_webhook_secret": SecretStr(STRIPE_SECRET),
        "github_webhook_secret": SecretStr(GITHUB_SECRET),
        "standard_webhook_secrets": {"crm": SecretStr(STANDARD_SECRET)},
    }

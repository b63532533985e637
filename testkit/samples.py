"""Sample deliveries for ``python -m devstack send``, signed with the providers' own code.

The default is the case onceonly exists for, on AgentMail: a customer's message
delivered three times (a Svix retry is the same event, the same ``svix-id``), out of
order with a newer message of the same thread, sent before it. Each delivery carries
the event id and message id that ingest's normaliser reads from it, so its fate can be
looked up afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from onceonly.foundation.providers import ALL, by_name
from onceonly.ingest import normalise
from testkit import payloads, signing

PROVIDERS = ALL  #: the routes, as ingest serves them (onceonly.foundation.providers)

Signer = Callable[[bytes, str], dict[str, str]]


class SampleError(ValueError):
    """A sample that cannot be built: unknown provider, no secret, unreadable file."""


@dataclass(frozen=True, slots=True)
class Sample:
    label: str  #: what this delivery is, for the report
    route: str  #: the path under /webhooks/
    body: bytes
    headers: dict[str, str]
    event_id: str
    message_id: str | None


@dataclass(frozen=True, slots=True)
class Posted:
    sample: Sample
    status: int  #: HTTP status, or 0 when the request did not get an answer
    detail: str  #: the answer's body (trimmed) or the connection error


#: each verifier scheme's signing (``msg_id``: a fixed id, as a retry carries the same one)
SIGNERS: Mapping[str, Callable[[str], Signer]] = {
    "svix": lambda msg_id: (
        lambda body, secret: signing.svix_headers(body, secret=secret, msg_id=msg_id)
    ),
    "standard": lambda msg_id: (
        lambda body, secret: signing.standard_headers(body, secret=secret, msg_id=msg_id)
    ),
    "stripe": lambda msg_id: lambda body, secret: signing.stripe_headers(body, secret=secret),
    "nylas": lambda msg_id: lambda body, secret: signing.nylas_headers(body, secret=secret),
    "github": lambda msg_id: (
        lambda body, secret: signing.github_headers(body, secret=secret, delivery=msg_id)
    ),
}


def _route(route: str) -> str:
    """The scheme that verifies ``route``; SampleError for a route ingest does not serve."""
    try:
        return by_name(route).verifier
    except KeyError:
        raise SampleError(
            f"unknown provider {route!r}: use one of {', '.join(PROVIDERS)}"
        ) from None


def sign(label: str, route: str, payload: bytes, secret: str, msg_id: str | None = None) -> Sample:
    """One signed delivery, with the ids ingest will read from it."""
    headers = SIGNERS[_route(route)](msg_id or f"msg_{uuid.uuid4().hex}")(payload, secret)
    envelope = normalise.for_route(route)(payload.decode(), headers, datetime.now(UTC))
    return Sample(label, route, payload, headers, envelope.event_id, envelope.message_id)


#: the sample event of each provider with a route of its own
DEFAULT_PAYLOADS: Mapping[str, Callable[[datetime], dict[str, Any]]] = {
    "agentmail": lambda at: payloads.agentmail_received(timestamp=at.isoformat()),
    "nylas": lambda at: payloads.nylas_message(message_id=f"msg-{uuid.uuid4().hex[:12]}"),
    "stripe": lambda at: payloads.stripe_event(),
    "github": lambda at: payloads.github_issue(number=int(uuid.uuid4().int % 100_000)),
}


def _default_payload(route: str, at: datetime) -> dict[str, Any]:
    if _route(route) == "standard":
        return payloads.standard_event(thread_id=f"case-{uuid.uuid4().hex[:8]}")
    return DEFAULT_PAYLOADS[route](at)


def agentmail_story(secret: str, *, copies: int, now: datetime) -> list[Sample]:
    """A newer message B first, then message A of the same thread ``copies`` times."""
    thread = f"thr_{uuid.uuid4().hex[:12]}"
    older = payloads.agentmail_received(
        thread_id=thread,
        timestamp=(now - timedelta(seconds=20)).isoformat(),
        text="Hi, can we move our meeting to Friday?",
    )
    newer = payloads.agentmail_received(
        thread_id=thread,
        timestamp=(now - timedelta(seconds=10)).isoformat(),
        text="Or Monday, if Friday does not work.",
    )
    first = sign("message B (newer, sent first)", "agentmail", payloads.dumps(newer), secret)
    a_id = f"msg_{uuid.uuid4().hex}"
    return [first] + [
        sign(f"message A, delivery {n}", "agentmail", payloads.dumps(older), secret, a_id)
        for n in range(1, copies + 1)
    ]


def samples(
    route: str, secret: str, *, copies: int, body: bytes | None = None, now: datetime
) -> list[Sample]:
    """What ``python -m devstack send`` posts: the AgentMail story, or one event ``copies``
    times."""
    if route == "agentmail" and body is None:
        return agentmail_story(secret, copies=copies, now=now)
    payload = body if body is not None else json.dumps(_default_payload(route, now)).encode()
    msg_id = f"msg_{uuid.uuid4().hex}"
    return [
        sign(f"{route} event, delivery {n}", route, payload, secret, msg_id)
        for n in range(1, copies + 1)
    ]


def secret_for(route: str, secrets: Mapping[str, str]) -> str:
    """The signing secret of ``route`` from ``secrets`` (provider or ``standard/<source>``)."""
    secret = secrets.get(route)
    if not secret:
        _route(route)  # an unknown route is named as such
        variable = by_name(route).variable
        raise SampleError(f"no secret for {route}: set {variable} (as ingest has it)")
    return secret


async def post_all(
    base_url: str, deliveries: list[Sample], timeout_s: float = 30.0
) -> list[Posted]:
    """POST each delivery in order, one at a time, and keep each answer."""
    out: list[Posted] = []
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for sample in deliveries:
            url = f"{base_url.rstrip('/')}/webhooks/{sample.route}"
            try:
                async with http.post(url, data=sample.body, headers=sample.headers) as answer:
                    text = (await answer.text())[:200]
                    out.append(Posted(sample, answer.status, text))
            except (aiohttp.ClientError, TimeoutError) as exc:
                out.append(Posted(sample, 0, f"no answer from {url}: {exc}"))
    return out

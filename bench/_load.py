"""The ingest benchmark's deliveries (AgentMail events signed up front with Svix's
``Webhook.sign``, right before the phase that uses them), and the :class:`Sample` a load
generator returns."""

from __future__ import annotations

import base64
import json
import math
import secrets
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

from testkit import payloads
from testkit.signing import svix_headers

#: Distinct threads the deliveries belong to: keys spread over every partition.
THREADS = 1024

_TEXT = (
    "Hi team,\n\nCould you move our onboarding call from Thursday to Friday at 10:00? "
    "Two of us are travelling on Thursday. If Friday does not work, Monday afternoon is "
    "also fine. Please also resend the invoice for November; the copy we received had the "
    "old billing address.\n\nThanks,\nDana"
)
_HTML = "<div>" + "".join(f"<p>{line}</p>" for line in _TEXT.split("\n") if line) + "</div>"


def webhook_secret() -> str:
    """A fresh Svix webhook secret (``whsec_`` and 24 random bytes), for one run."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass(frozen=True, slots=True)
class Delivery:
    body: bytes
    headers: dict[str, str]


def agentmail_body(
    n: int,
    now: datetime,
    *,
    thread_id: str | None = None,
    message_id: str | None = None,
    text: str | None = None,
) -> bytes:
    """An AgentMail ``message.received`` event (about 1.5 KB), distinct for every ``n``.
    ``thread_id``, ``message_id`` and ``text`` replace the defaults (a thread among
    :data:`THREADS`, a random Message-ID, a fixed customer email) when given."""
    inbox = f"support-{n % 8}@agentmail.to"
    stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    body = _TEXT if text is None else text
    event = payloads.agentmail_received(
        inbox_id=inbox,
        thread_id=thread_id or f"thr_{n % THREADS:04d}",
        message_id=message_id or f"<{uuid.uuid4().hex}@mail.example.com>",
        timestamp=stamp,
        sender="Dana Customer <dana@example.com>",
        text=body,
    )
    event["message"].update(
        labels=["received", "unread"],
        subject="Re: onboarding call and November invoice",
        preview=body[:120],
        html=_HTML if text is None else f"<div><p>{body}</p></div>",
        size=4312,
    )
    return json.dumps(event).encode()


def message_id(tag: str, n: int) -> str:
    """The Message-ID of the ``n``-th message of a run tagged ``tag`` (what the mail server
    counts replies by)."""
    return f"<{tag}-{n:06d}@mail.example.com>"


def thread_message(tag: str, n: int, now: datetime, text: str | None = None) -> tuple[str, bytes]:
    """The ``n``-th message of a run tagged ``tag``, alone in a thread of its own: its
    Message-ID and its event (:func:`agentmail_body`)."""
    mid = message_id(tag, n)
    return mid, agentmail_body(n, now, thread_id=f"thr_{tag}_{n:06d}", message_id=mid, text=text)


def signed(secret: str, body: bytes, msg_id: str, now: datetime) -> Delivery:
    """``body`` as a delivery signed with ``svix.webhooks.Webhook.sign`` at ``now``."""
    return Delivery(body, svix_headers(body, secret=secret, msg_id=msg_id, at=now))


def sign_pool(secret: str, size: int) -> list[Delivery]:
    """``size`` distinct deliveries signed with ``svix.webhooks.Webhook.sign`` now."""
    now = datetime.now(UTC)
    return [
        signed(secret, agentmail_body(n, now), f"msg_{uuid.uuid4().hex}", now) for n in range(size)
    ]


@dataclass(slots=True)
class Sample:
    """What one phase measured. Latencies are in seconds, of 204 answers only."""

    #: the status that counts as delivered
    ok_status: ClassVar[str] = "204"

    duration_s: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    send_lag: list[float] = field(default_factory=list)
    #: the open loop's: how late the generator queued each request, before any wait for a
    #: free connection (``send_lag`` includes that wait)
    dispatch_lag: list[float] = field(default_factory=list)
    pool_wrapped: bool = False

    @property
    def ok(self) -> int:
        return self.statuses[self.ok_status]

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != self.ok_status)

    @property
    def rate(self) -> float:
        """Delivered answers per second of the measured window."""
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000

    def failures(self) -> str:
        failed = sorted(self.statuses.items())
        return ", ".join(f"{n} x {s}" for s, n in failed if s != self.ok_status)


def per_second(times: Iterable[float]) -> float:
    """Events a second from the first to the last; NaN for fewer than two, or none apart."""
    ordered = sorted(times)
    if len(ordered) < 2 or ordered[-1] <= ordered[0]:
        return math.nan
    return (len(ordered) - 1) / (ordered[-1] - ordered[0])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]

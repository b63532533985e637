"""The ingest benchmark's deliveries, and its open-loop generator (asyncio, aiohttp clients).

Deliveries are AgentMail ``message.received`` events, each body distinct, signed up front
with Svix's own ``Webhook.sign`` so that signing is not part of what is measured. A pool
is signed right before the phase that uses it: its timestamps stay well inside Svix's
5-minute tolerance for the phase's duration.

The closed-loop peaks are wrk's (:mod:`bench._wrk`, which sends these pools too); this
module keeps the open loop, :func:`open_loop`: arrivals scheduled at a fixed rate by the
clock, whatever the server does. Latency counts from the *scheduled* send time, so a
server that stalls is charged for the requests queued behind the stall (no coordinated
omission).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

import aiohttp
import svix.webhooks

#: Distinct threads the deliveries belong to: keys spread over every partition.
THREADS = 1024

_TEXT = (
    "Hi team,\n\nCould you move our onboarding call from Thursday to Friday at 10:00? "
    "Two of us are travelling on Thursday. If Friday does not work, Monday afternoon is "
    "also fine. Please also resend the invoice for November; the copy we received had the "
    "old billing address.\n\nThanks,\nDana"
)
_HTML = "<div>" + "".join(f"<p>{line}</p>" for line in _TEXT.split("\n") if line) + "</div>"


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
    thread = thread_id or f"thr_{n % THREADS:04d}"
    stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    body = _TEXT if text is None else text
    message = {
        "inbox_id": inbox,
        "thread_id": thread,
        "message_id": message_id or f"<{uuid.uuid4().hex}@mail.example.com>",
        "labels": ["received", "unread"],
        "timestamp": stamp,
        "from": "Dana Customer <dana@example.com>",
        "to": [inbox],
        "subject": "Re: onboarding call and November invoice",
        "preview": body[:120],
        "text": body,
        "html": _HTML if text is None else f"<div><p>{body}</p></div>",
        "size": 4312,
        "created_at": stamp,
        "updated_at": stamp,
    }
    event = {
        "type": "event",
        "event_type": "message.received",
        "event_id": f"evt_{uuid.uuid4().hex}",
        "message": message,
        "thread": {"inbox_id": inbox, "thread_id": thread},
    }
    return json.dumps(event).encode()


def sign_pool(secret: str, size: int) -> list[Delivery]:
    """``size`` distinct deliveries signed with ``svix.webhooks.Webhook.sign`` now."""
    webhook = svix.webhooks.Webhook(secret)
    now = datetime.now(UTC)
    stamp = str(int(now.timestamp()))
    pool: list[Delivery] = []
    for n in range(size):
        body = agentmail_body(n, now)
        msg_id = f"msg_{uuid.uuid4().hex}"
        pool.append(
            Delivery(
                body,
                {
                    "svix-id": msg_id,
                    "svix-timestamp": stamp,
                    "svix-signature": webhook.sign(msg_id, now, body.decode()),
                    "content-type": "application/json",
                },
            )
        )
    return pool


# --------------------------------------------------------------------------- figures


@dataclass(slots=True)
class Sample:
    """What one phase measured. Latencies are in seconds, of 204 answers only."""

    #: the status that counts as delivered
    ok_status: ClassVar[str] = "204"

    duration_s: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    send_lag: list[float] = field(default_factory=list)
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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@contextlib.asynccontextmanager
async def _no_gc_pauses() -> AsyncIterator[None]:
    """No cyclic garbage collection in the generator while it measures: a full collection
    over the signed pool stalls the loop for tens of ms, which would be charged to the
    server. The phase is short and bounded; the collector catches up afterwards."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _connector(concurrency: int) -> aiohttp.TCPConnector:
    # One keep-alive connection per worker, never more: the load stays bounded.
    return aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=None)


async def _post(session: aiohttp.ClientSession, url: str, delivery: Delivery) -> str:
    """The answer's status as text, or the name of the client error."""
    try:
        async with session.post(url, data=delivery.body, headers=delivery.headers) as response:
            await response.read()
            return str(response.status)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return type(exc).__name__


class _Cycle:
    """Hands out the pool's deliveries in order; notes when it had to start again."""

    def __init__(self, pool: list[Delivery]) -> None:
        self.size = len(pool)
        self.used = 0
        self._it: Iterator[Delivery] = itertools.cycle(pool)

    def next(self) -> Delivery:
        self.used += 1
        return next(self._it)

    @property
    def wrapped(self) -> bool:
        return self.used > self.size


async def open_loop(
    url: str, pool: list[Delivery], *, rate: float, duration_s: float, concurrency: int
) -> Sample:
    """Fixed-rate arrivals: delivery ``i`` is due at ``start + i / rate``. Latency is from
    that due time to the answer; ``send_lag`` is how late the generator actually sent it."""
    total = int(rate * duration_s)
    deliveries = _Cycle(pool)
    due = iter(range(total))
    timeout = aiohttp.ClientTimeout(total=30)
    sample = Sample(duration_s=total / rate if rate > 0 else 0.0)
    async with (
        _no_gc_pauses(),
        aiohttp.ClientSession(connector=_connector(concurrency), timeout=timeout) as session,
    ):
        start = time.perf_counter() + 0.05

        async def worker() -> None:
            for i in due:
                scheduled = start + i / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sample.send_lag.append(time.perf_counter() - scheduled)
                status = await _post(session, url, deliveries.next())
                sample.statuses[status] += 1
                if status == "204":
                    sample.latencies.append(time.perf_counter() - scheduled)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    sample.pool_wrapped = deliveries.wrapped
    return sample

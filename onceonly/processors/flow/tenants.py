"""Fairness between tenants: who gets the next free writer slot.

A *tenant* is whatever ``ONCEONLY_TENANT_KEY`` names: ``inbox`` (the default: the
AgentMail inbox or the Nylas grant a message came to) or a field of the envelope
(``account_id``, ``provider``, ``event_type``, ...). :class:`FairScheduler` is pure: it
holds the waiters of each tenant in order, at most ``per_tenant`` calls in flight for one
tenant and ``capacity`` for all, and gives each free slot to the tenant with work waiting
that it has served least of late: each grant counts 1 for its tenant, and every count
fades by ``capacity / (capacity + 1)`` at each grant, so a count covers about the last
``capacity`` grants. Among tenants served alike (all busy all along) the slots go
round-robin. A tenant whose calls arrive during another's flood takes the next free slot,
and goes on taking them until it has had about its share of recent grants (at most
0.7 x ``capacity`` in a row): strict alternation would give it every other slot, so a
burst of 10 calls at 16 slots would wait a second round of the flood's calls.
"""

from __future__ import annotations

import contextvars
import heapq
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from onceonly.schemas.envelope import Envelope

W = TypeVar("W")

#: the tenant of the reply being written in this task (set by the pipeline per burst)
current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("onceonly_tenant", default="")

INBOX = "inbox"


def tenant_of(key: str, envelope: Envelope, inbox_id: str | None = None) -> str:
    """The tenant a message belongs to under ``ONCEONLY_TENANT_KEY=key`` (``inbox``, or a
    field of the envelope: the settings refuse any other name)."""
    if key == INBOX:
        return str(inbox_id or envelope.account_id or "")
    value = getattr(envelope, key, None)  # the field the operator named
    return "" if value is None else str(value)


def set_tenant(key: str, envelope: Envelope, inbox_id: str | None) -> None:
    """The tenant of the reply this task writes next (the pipeline, once per burst), under
    ``ONCEONLY_TENANT_KEY=key``."""
    current_tenant.set(tenant_of(key, envelope, inbox_id))


#: the scale of the counts is renormalised when it passes this
_RESCALE_AT = 1e12


@dataclass
class FairScheduler(Generic[W]):
    """Each free slot to the waiting tenant served least of late, within the limits.

    Counts fade lazily: instead of scaling every tenant's count down at each grant, a
    grant adds a weight that grows by ``(capacity + 1) / capacity``, and counts compare
    as they are (:data:`_RESCALE_AT` brings them back down now and then). A count then
    changes only for the tenant granted, so the waiting tenants sit in a heap by count,
    ties in the order they began waiting.
    """

    capacity: int
    per_tenant: int | None = None
    in_flight: dict[Hashable, int] = field(default_factory=dict)
    _waiting: dict[Hashable, deque[W]] = field(default_factory=dict)
    #: each tenant's recent grants, in the current weight's scale
    _served: dict[Hashable, float] = field(default_factory=dict)
    _weight: float = 1.0
    #: waiting tenants by (count, order); an entry not in ``_queued`` is stale
    _heap: list[tuple[float, int, Hashable]] = field(default_factory=list)
    _queued: dict[Hashable, tuple[float, int, Hashable]] = field(default_factory=dict)
    _order: int = 0
    _total: int = 0

    @property
    def running(self) -> int:
        return self._total

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def add(self, tenant: Hashable, waiter: W) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            queue = self._waiting[tenant] = deque()
            self._enqueue(tenant)
        queue.append(waiter)

    def remove(self, tenant: Hashable, waiter: W) -> None:
        """A waiter gave up before its turn."""
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]
                del self._queued[tenant]

    def _eligible(self, tenant: Hashable) -> bool:
        return self.per_tenant is None or self.in_flight.get(tenant, 0) < self.per_tenant

    def ready(self) -> bool:
        """True when a slot is free and some tenant may take it."""
        return self._total < self.capacity and any(self._eligible(t) for t in self._waiting)

    def grant(self) -> tuple[Hashable, W] | None:
        """The next waiter to run: the first of the eligible tenant served least of late
        (ties: the one waiting longest for its turn), or None."""
        if self._total >= self.capacity:
            return None
        tenant = self._pop_eligible()
        if tenant is None:
            return None
        queue = self._waiting[tenant]
        waiter = queue.popleft()
        self._count(tenant)
        if queue:
            self._enqueue(tenant)
        else:
            del self._waiting[tenant]
        self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1
        self._total += 1
        return tenant, waiter

    def release(self, tenant: Hashable) -> None:
        """A granted call ended."""
        count = self.in_flight.get(tenant, 0) - 1
        if count > 0:
            self.in_flight[tenant] = count
        else:
            self.in_flight.pop(tenant, None)
        self._total = max(0, self._total - 1)

    def _enqueue(self, tenant: Hashable) -> None:
        self._order += 1
        entry = (self._served.get(tenant, 0.0), self._order, tenant)
        self._queued[tenant] = entry
        heapq.heappush(self._heap, entry)

    def _pop_eligible(self) -> Hashable | None:
        skipped: list[tuple[float, int, Hashable]] = []
        found: Hashable | None = None
        while self._heap:
            entry = heapq.heappop(self._heap)
            tenant = entry[2]
            if self._queued.get(tenant) is not entry:
                continue  # stale: granted or given up since
            if not self._eligible(tenant):
                skipped.append(entry)
                continue
            del self._queued[tenant]
            found = tenant
            break
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        return found

    def _count(self, tenant: Hashable) -> None:
        """One grant to ``tenant``; every other count fades (by the weight's growth)."""
        self._weight *= (self.capacity + 1) / max(1, self.capacity)
        self._served[tenant] = self._served.get(tenant, 0.0) + self._weight
        if self._weight > _RESCALE_AT:
            self._rescale()

    def _rescale(self) -> None:
        """Counts back to the scale of a weight of 1; faded tenants not waiting or
        running are forgotten."""
        scale = self._weight
        self._weight = 1.0
        self._served = {
            t: c / scale
            for t, c in self._served.items()
            if c / scale > 1e-6 or t in self._waiting or t in self.in_flight
        }
        self._queued = {
            t: (self._served.get(t, 0.0), order, t) for t, (_, order, _) in self._queued.items()
        }
        self._heap = list(self._queued.values())
        heapq.heapify(self._heap)

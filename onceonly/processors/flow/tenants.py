"""Fairness between tenants: who gets the next free writer slot.

A *tenant* is whatever ``ONCEONLY_TENANT_KEY`` names: ``inbox`` (the default: the
AgentMail inbox or the Nylas grant a message came to) or a field of the envelope
(``account_id``, ``provider``, ``event_type``, ...). :class:`FairScheduler` is pure: it
holds the waiters of each tenant in order, at most ``per_tenant`` calls in flight for one
tenant and ``capacity`` for all, and gives each free slot to the next tenant round-robin
that has work waiting. A tenant with 10,000 calls queued delays another's one call by at
most one call's time: the other tenant is next in the rotation.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

W = TypeVar("W")

#: the tenant of the reply being written in this task (set by the pipeline per burst)
current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("onceonly_tenant", default="")

INBOX = "inbox"


def tenant_of(key: str, envelope: Any, inbox_id: str | None = None) -> str:
    """The tenant a message belongs to under ``ONCEONLY_TENANT_KEY=key``."""
    if key == INBOX:
        return str(inbox_id or getattr(envelope, "account_id", None) or "")
    value = getattr(envelope, key, None)
    return "" if value is None else str(value)


def set_tenant(settings: Any, envelope: Any, inbound: Any) -> None:
    """The tenant of the reply this task writes next (the pipeline, once per burst), under
    ``settings.tenant_key`` (a settings stand-in without one: the inbox)."""
    key = getattr(settings, "tenant_key", INBOX)
    current_tenant.set(tenant_of(key, envelope, getattr(inbound, "inbox_id", None)))


@dataclass
class FairScheduler(Generic[W]):
    """Round-robin over the tenants with waiters, within the slots free."""

    capacity: int
    per_tenant: int | None = None
    in_flight: dict[Hashable, int] = field(default_factory=dict)
    _waiting: dict[Hashable, deque[W]] = field(default_factory=dict)
    #: tenants with waiters, in the order they get their turn
    _turns: deque[Hashable] = field(default_factory=deque)
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
            self._turns.append(tenant)
        queue.append(waiter)

    def remove(self, tenant: Hashable, waiter: W) -> None:
        """A waiter gave up before its turn."""
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]
                self._turns.remove(tenant)

    def _eligible(self, tenant: Hashable) -> bool:
        return self.per_tenant is None or self.in_flight.get(tenant, 0) < self.per_tenant

    def ready(self) -> bool:
        """True when a slot is free and some tenant may take it."""
        return self._total < self.capacity and any(self._eligible(t) for t in self._turns)

    def grant(self) -> tuple[Hashable, W] | None:
        """The next waiter to run (its tenant's turn comes round again last), or None."""
        if self._total >= self.capacity:
            return None
        for _ in range(len(self._turns)):
            tenant = self._turns[0]
            self._turns.rotate(-1)
            if not self._eligible(tenant):
                continue
            queue = self._waiting[tenant]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[tenant]
                self._turns.remove(tenant)
            self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1
            self._total += 1
            return tenant, waiter
        return None

    def release(self, tenant: Hashable) -> None:
        """A granted call ended."""
        count = self.in_flight.get(tenant, 0) - 1
        if count > 0:
            self.in_flight[tenant] = count
        else:
            self.in_flight.pop(tenant, None)
        self._total = max(0, self._total - 1)

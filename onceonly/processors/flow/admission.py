"""Admission of writer calls: a free slot, the tenant's turn, the group's rate, no pause.

The asyncio side of :mod:`onceonly.processors.flow.tenants` and
:mod:`onceonly.processors.flow.rate`. A
writer call
waits in :meth:`Admission.enter` until all of these hold, then runs and tells
:meth:`Admission.leave` how it ended:

* fewer than ``ONCEONLY_WRITER_CONCURRENCY`` calls in flight on this worker, and fewer
  than ``ONCEONLY_TENANT_CONCURRENCY`` of its tenant's; each free slot goes to the
  tenant with calls waiting served least of late (:mod:`~onceonly.processors.flow.tenants`);
* this worker's share of ``ONCEONLY_MODEL_RPM`` / ``ONCEONLY_MODEL_TPM`` allows a call now
  (the share is its partitions / the topic's, set at every rebalance, and zero from the
  moment a rebalance revokes them until it completes);
* the model is not paused by a 429 (and, after a pause, no probe is out).

Only the call whose turn it is waits for the rate, so a tenant that comes in during
another's flood is next in line for the rate too, not behind every waiting call. A call
waits; it never fails for want of budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from onceonly.foundation.settings import Settings
from onceonly.processors.flow.rate import INF, Limits, Pause
from onceonly.processors.flow.tenants import FairScheduler

log = structlog.get_logger("onceonly.agent")


@dataclass(eq=False)
class Ticket:
    """One admitted call."""

    tenant: str
    waited_s: float
    charged: float = 0.0
    probe: bool = False
    throttles: int = 0  #: the model's 429s before it was admitted (:class:`Pause`)


class Admission:
    def __init__(
        self,
        capacity: int,
        *,
        per_tenant: int | None = None,
        limits: Limits | None = None,
        model: str = "writer",
        clock: Callable[[], float] = time.monotonic,
        on_pause: Callable[[str, float], None] = lambda model, seconds: None,
        on_admit: Callable[[float], None] = lambda waited_s: None,
    ) -> None:
        self.scheduler: FairScheduler[asyncio.Future[Ticket]] = FairScheduler(capacity, per_tenant)
        self.limits = limits or Limits()
        self.pause = Pause()
        self.model = model
        self.clock = clock
        self.on_pause = on_pause
        self.on_admit = on_admit
        self._timer: asyncio.TimerHandle | None = None
        self._entered: dict[asyncio.Future[Ticket], float] = {}

    @property
    def in_flight(self) -> int:
        return self.scheduler.running

    def set_share(self, share: float) -> None:
        """This worker's share of the group's budget changed (a rebalance completed)."""
        if self.limits.active and share != self.limits.share:
            log.info("model budget share", share=round(share, 4), model=self.model)
        self.limits.set_share(share, self.clock())
        self._pump()

    async def enter(self, tenant: str) -> Ticket:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Ticket] = loop.create_future()
        self._entered[future] = self.clock()
        self.scheduler.add(tenant, future)
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted as it was cancelled
                self.leave(future.result(), ok=False)
            else:
                self.scheduler.remove(tenant, future)
                self._entered.pop(future, None)
            raise

    def leave(
        self,
        ticket: Ticket,
        *,
        ok: bool,
        retry_after_s: float | None = None,
        tokens: float | None = None,
        running: bool = False,
    ) -> None:
        """The call ended: ``ok`` (the model answered), 429 (``retry_after_s``), or failed.
        ``running``: its caller gave up on it (a timeout) but it runs on in a thread (a sync
        writer's), which it keeps: its slot and its tokens wait for :meth:`freed`."""
        now = self.clock()
        if not running:
            self.scheduler.release(ticket.tenant)
            self.limits.settle(now, ticket.charged, tokens)
        if retry_after_s is not None:
            if self.pause.throttled(now, retry_after_s):
                log.warning(
                    "model paused: it answered 429",
                    model=self.model,
                    retry_after_s=retry_after_s,
                    waiting=self.scheduler.waiting,
                )
                self.on_pause(self.model, retry_after_s)
        else:
            self.pause.ended(ticket.probe, ok)
        self._pump()

    def freed(self, ticket: Ticket, tokens: float | None = None, *, ok: bool = False) -> None:
        """A call left ``running`` has ended in its thread: its slot is free again. ``ok``:
        the model answered it; a probe's answer ends the probing (:meth:`Pause.answered_late`)."""
        if ok and ticket.probe:
            self.pause.answered_late(ticket.throttles)
        self.scheduler.release(ticket.tenant)
        self.limits.settle(self.clock(), ticket.charged, tokens)
        self._pump()

    def _pump(self) -> None:
        """Admit every call that may start now; arm a timer for the next that may not."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self.scheduler.ready():
            now = self.clock()
            paused = self.pause.delay(now)
            if paused is None:  # a probe is out: its end pumps again
                return
            wait = max(paused, self.limits.delay(now))
            if wait > 0:
                if wait < INF:
                    loop = asyncio.get_running_loop()
                    self._timer = loop.call_at(loop.time() + wait, self._pump)
                return
            granted = self.scheduler.grant()
            if granted is None:
                return
            tenant, future = granted
            entered = self._entered.pop(future, now)
            if future.done():  # cancelled while waiting
                self.scheduler.release(tenant)
                continue
            ticket = Ticket(
                str(tenant),
                now - entered,
                self.limits.take(now),
                self.pause.start(),
                self.pause.throttles,
            )
            future.set_result(ticket)
            self.on_admit(ticket.waited_s)


def admission_for(settings: Settings, metrics: Any = None) -> Admission:
    """The worker's admission, from ONCEONLY_WRITER_CONCURRENCY, ONCEONLY_TENANT_CONCURRENCY
    and ONCEONLY_MODEL_RPM/TPM; its share is 0 until the first assignment."""
    limits = Limits(
        rpm=settings.model_rpm,
        tpm=settings.model_tpm,
        share=0.0,
        estimate=float(settings.model_tokens_estimate),
    )
    hooks: dict[str, Any] = {}
    if metrics is not None:
        hooks = {
            "on_pause": metrics.model_paused,
            "on_admit": metrics.writer_admission_wait.observe,
        }
    return Admission(
        settings.writer_concurrency,
        per_tenant=settings.tenant_concurrency,
        limits=limits,
        **hooks,
    )


def owned_share(assigned: Iterable[Any], topic: str, partitions: int) -> float:
    """This worker's share of the group's budget: the partitions of ``topic`` it owns
    (topic-partitions with ``.topic``) out of the topic's ``partitions``."""
    owned = {tp.partition for tp in assigned if tp.topic == topic}
    return len(owned) / partitions if partitions > 0 else 0.0

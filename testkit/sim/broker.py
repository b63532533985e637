"""The broker failing under the workers: a leader failover of the changelogs' partitions,
and produce requests whose batch expires, from a generator of their own (a sixth: the
schedule's other draws are the ones they were before).

The workers' producer is faust's aiokafka producer as onceonly configures it: ``acks=-1``,
no idempotence outside transactions, and faust's ``producer_request_timeout`` of 20
minutes, within which a request the broker did not answer is sent again.

- **A failover** (``failover``, 1-30 s): the node leading the ledger's and the events
  table's changelog partitions is gone until a new leader is elected. A write that reaches
  them meanwhile waits, retried, and lands once a leader is up; three in ten ledger writes
  land twice (the first copy on the old leader before it failed, its acknowledgement lost
  with the connection, and again when retried: without idempotence the log holds both).
  The first copy is appended when the write arrives, during the failover: nothing else
  lands in between (every other write waits), so the log's order is the one a copy landed
  just before the failure would give; only its landing time is later. A read of the
  ledger partition (arbitration's, the audit's) waits for the new leader.
- **Expiries** (``produce_expiry``, 10-240 s): every ledger write that reaches the broker
  meanwhile fails 5-60 s after it left with ``RequestTimedOutError``, the retriable error
  aiokafka fails an expired batch with when the broker never answered (what a real broker
  paused past the request timeout gave, tests/integration/processors/test_broker_away.py;
  the timeout made short so that the schedule plays on); half of them landed first, their
  acknowledgement lost. The writer cannot tell which: the record is in the log or not,
  and not in its store. With :attr:`Broker.lose_table_writes` (on since finding F37 was fixed),
  half the events-table writes that reach it meanwhile are lost, silently, as faust loses
  a table's changelog write that failed (its future is awaited by nobody): the member's
  store keeps the entry, the changelog never has it.
  A dead letter produced meanwhile (:attr:`Broker.expire_letters`, on since finding F41
  was fixed; ``--no-letter-expiries``) fails as a ledger write does, half of them landed
  first: the worker meets it through its seam (``broker_errors.Produced``) as the broker
  away, and exits.

A worker meets a failed write as the product does: the write goes through the product's
seam (``runtime.broker_errors.changelog_write``), which raises the expiry as
``BrokerUnavailable``; that escapes the lane job (a burst's: ``conversation.tried`` lets
it through, no dead letter), or the audit, and the worker exits to be restarted
(``worker._fatal``: its store recovered from the changelog, what landed included, and its
records read again).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from aiokafka.errors import RequestTimedOutError

from testkit.sim.io import Later
from testkit.sim.schedule import Fault

if TYPE_CHECKING:
    from testkit.sim.world import World

T = TypeVar("T")

#: of the writes that reach a failing-over partition, the share that lands twice
TWICE = 0.3
#: how long an expired write waits before its error, and a fatal worker before its restart
EXPIRY_S = (5.0, 60.0)
RESTART_S = (1.0, 10.0)


class Broker:
    """The changelogs' leader as the workers' requests meet it."""

    #: the ``produce_expiry`` faults played (``--no-expiries``: drawn, not played); they
    #: were off in every schedule while findings F38 and F39 were open
    expiries = True
    #: events-table writes lost while writes expire (``--no-table-loss``: kept); off while
    #: finding F37 was open
    lose_table_writes = True
    #: dead letters produced while writes expire fail as the ledger's writes do
    #: (``--no-letter-expiries``: taken at once)
    expire_letters = True

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.up_at = 0.0  #: virtual time a leader is back (past: one is up)
        #: the dead letters' draws, a generator of their own (the others draw as before)
        self._letter_rng: random.Random | None = None
        self.expire_until = 0.0  #: virtual time ledger writes stop expiring

    def play(self, fault: Fault) -> None:
        if fault.kind == "failover":
            self.up_at = max(self.up_at, self.world.loop.time() + fault.arg)
            self.world.trace("broker", f"leader failover for {fault.arg:.3f}s")
        elif fault.kind == "produce_expiry" and self.expiries:
            self.expire_until = max(self.expire_until, self.world.loop.time() + fault.arg)
            self.world.trace("broker", f"ledger writes expire for {fault.arg:.3f}s")

    def _down_s(self) -> float:
        return self.up_at - self.world.loop.time()

    def when_up(self, far: Callable[[], T]) -> Callable[[], T | Later[T]]:
        """``far`` run once a leader is up (at once when one is)."""

        def step() -> T | Later[T]:
            wait = self._down_s()
            return Later(wait, step) if wait > 0 else far()

        return step

    def produce(self, land: Callable[[], int]) -> Callable[[], int | Later[int]]:
        """The far end of a ledger write whose record ``land`` appends (its offset)."""

        def arrive() -> int | Later[int]:
            if self.world.loop.time() < self.expire_until:
                landed = self.rng.random() < 0.5
                if landed:
                    land()
                what = "landed, its ack lost" if landed else "not landed"
                self.world.trace("broker", f"a ledger write expires: {what}")
                return Later(self.rng.uniform(*EXPIRY_S), _expired)
            if self._down_s() <= 0:
                return land()
            if self.rng.random() < TWICE:
                land()  # on the old leader, its ack lost; retried, it lands again
                self.world.trace("broker", "a ledger write landed before the failover")
            return self.when_up(land)()

        return arrive

    def table_write(
        self, put: Callable[[], None], what: str = "an events-table write"
    ) -> Callable[[], Later[bool] | bool]:
        """The far end of a table's write (``what``): ``put`` once a leader is up (True); with
        :attr:`lose_table_writes`, lost half the time while writes expire (False: faust
        awaits no events-table write; a hold's, the worker awaits)."""

        def landed() -> bool:
            put()
            return True

        def arrive() -> Later[bool] | bool:
            expiring = self.lose_table_writes and self.world.loop.time() < self.expire_until
            if expiring and self.rng.random() < 0.5:
                self.world.trace("broker", f"{what} expired, unseen")
                return False
            return self.when_up(landed)()

        return arrive

    def dead_letter(self, land: Callable[[], None]) -> asyncio.Future[None]:
        """A dead letter's produce (``DeadLetters._write`` awaits it): taken at once, or, while
        writes expire (:attr:`expire_letters`), failed 5-60 s later with the batch's expiry,
        half of them landed first (the ack lost)."""
        loop = self.world.loop
        done: asyncio.Future[None] = loop.create_future()
        if not (self.expire_letters and self.expiries and loop.time() < self.expire_until):
            land()
            done.set_result(None)
            return done
        if self._letter_rng is None:
            self._letter_rng = random.Random(self.world.schedule.seed * 8167 + 97)
        rng = self._letter_rng
        landed = rng.random() < 0.5
        if landed:
            land()
        self.world.trace("broker", f"a dead letter expires: {'landed' if landed else 'not landed'}")
        loop.call_later(rng.uniform(*EXPIRY_S), _fail, done)
        return done

    def restart_s(self) -> float:
        return self.rng.uniform(*RESTART_S)


def expiry() -> RequestTimedOutError:
    """What aiokafka fails a batch with once the broker never answered it."""
    return RequestTimedOutError("the batch expired: no answer within producer_request_timeout")


def _fail(done: asyncio.Future[None]) -> None:
    if not done.done():  # its writer may have been cancelled meanwhile
        done.set_exception(expiry())


def _expired() -> int:
    raise expiry()

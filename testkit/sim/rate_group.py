"""The group of the rate world (:mod:`testkit.sim.rates`): its workers, each the product's
``Writer`` with its ``Admission`` and ``Limits`` on the virtual clock, and the group that
owns the deliveries partitions: eager rebalances each member completes a moment apart, a
lane per thread, kills, pauses (a frozen worker admits nothing and sends what it admitted
once it runs), joins and leaves."""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from onceonly.processors.exceptions import WriterFailed
from onceonly.processors.flow.admission import Admission, owned_share
from onceonly.processors.flow.rate import Limits
from onceonly.processors.writer.contract import Inbound
from onceonly.processors.writer.runner import Writer, WriterPolicy
from testkit.sim.io import Actor, Killed, current
from testkit.sim.log import DRAIN_GRACE_S, SESSION_S
from testkit.sim.model import SimModel
from testkit.sim.schedule import EPOCH, Fault

if TYPE_CHECKING:
    from testkit.sim.rates import RateSchedule

TOPIC = "deliveries"


class FrozenAdmission(Admission):
    """The worker's admission, frozen with its process: a paused worker's loop runs no
    timer, so it admits nothing until it resumes (then one call, and a timer for the next,
    as after any wait)."""

    def __init__(self, member: Member, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member = member

    def _pump(self) -> None:
        if not self.member.paused:
            super()._pump()


class Member(Actor):
    """One worker: its writer and admission, the partitions it was last assigned."""

    def __init__(self, world: Group, name: str) -> None:
        super().__init__(name)
        self.world = world
        limits = Limits(rpm=world.schedule.rpm, share=0.0)
        self.admission = FrozenAdmission(self, 16, limits=limits, clock=world.loop.time)
        self.writer = Writer(
            self._model, WriterPolicy(timeout_s=120.0, attempts=3), admission=self.admission
        )
        self.generation = -1
        self.owned: frozenset[int] = frozenset()
        self.lanes: dict[int, asyncio.Task[None]] = {}
        #: an assignment that completed while it was paused, applied when it resumes
        self.on_resume: Callable[[], None] | None = None

    async def _model(self, burst: Sequence[Inbound]) -> str:
        await self.awake()  # a call admitted as the worker froze starts once it runs
        world = self.world
        if self.generation != world.generation:  # a zombie's: its partitions have moved
            world.zombie_starts.append(world.loop.time())
        world.trace(self.name, f"call started (share {self.admission.limits.share:.3f})")
        return await world.model(burst)

    def resume(self) -> None:
        super().resume()
        self.admission._pump()

    def owns(self, partition: int) -> bool:
        world = self.world
        return (
            not self.dead
            and self.generation == world.generation
            and world.owners.get(partition) is self
        )

    def assigned(self, generation: int, partitions: frozenset[int]) -> None:
        """The rebalance completed for this member: ``lifecycle.share_model_budget``."""
        self.generation, self.owned = generation, partitions
        tps = [SimpleNamespace(topic=TOPIC, partition=p) for p in partitions]
        share = owned_share(tps, TOPIC, self.world.schedule.partitions)
        self.admission.set_share(1.0 if self.world.schedule.per_worker else share)
        self.world.trace(self.name, f"assigned {sorted(partitions)} share {share:.3f}")
        self.fetch()

    def revoke(self) -> None:
        """Its partitions are gone: running lanes get the drain's grace, then stop; no call
        starts on the share meanwhile (the worker's drain sets it to zero)."""
        self.owned = frozenset()
        self.admission.set_share(0.0)
        running = list(self.lanes.values())
        if running:
            self.world.loop.call_later(DRAIN_GRACE_S, lambda: [t.cancel() for t in running])
        self.lanes = {}

    def fetch(self) -> None:
        if self.dead or self.paused:
            return
        for thread in self.world.waiting_threads(self):
            if thread not in self.lanes:
                self.lanes[thread] = self.world.loop.create_task(self._lane(thread))

    async def _lane(self, thread: int) -> None:
        current.set(self)
        world = self.world
        try:
            while (index := world.next_of(self, thread)) is not None:
                message = world.message(index)
                with contextlib.suppress(WriterFailed):  # dead-lettered: only the rate is judged
                    await self.writer.write([message])
                if not self.owns(world.partition_of(thread)):
                    return
                world.done.add(index)
        except (asyncio.CancelledError, Killed):
            pass
        except Exception as exc:  # a lane that raised: a problem of the run
            world.errors.append(f"{self.name} lane t{thread}: {exc!r}")
        finally:
            if self.lanes.get(thread) is asyncio.current_task():
                del self.lanes[thread]


class Group:
    def __init__(self, schedule: RateSchedule) -> None:
        self.schedule = schedule
        self.loop = asyncio.get_running_loop()
        self.rng = random.Random(schedule.seed * 7919 + 11)
        self.model = SimModel(random.Random(schedule.seed * 17 + 13), self.trace)
        self.events: list[tuple[float, str, str]] = []
        self.members: list[Member] = []
        self.owners: dict[int, Member] = {}
        self.generation = 0
        self.arrived = 0  #: messages arrived so far (indexes below it)
        self.done: set[int] = set()
        self.errors: list[str] = []
        #: calls that started after their worker's generation ended (admitted before it
        #: froze, sent once it ran again)
        self.zombie_starts: list[float] = []
        self._names = 0

    def trace(self, who: str, what: str) -> None:
        self.events.append((self.loop.time(), who, what))

    def partition_of(self, thread: int) -> int:
        return zlib.crc32(f"t{thread}".encode()) % self.schedule.partitions

    def message(self, index: int) -> Inbound:
        thread = self.schedule.arrivals[index][1]
        return Inbound(
            inbox_id="inbox@sim",
            message_id=f"<m{index}@sim>",
            thread_key=f"agentmail:t{thread}",
            thread_id=f"t{thread}",
            event_id=f"ev{index}",
            occurred_at=EPOCH,
            sender="customer@example.com",
            subject="question",
            text=f"message {index}",
        )

    def waiting_threads(self, member: Member) -> list[int]:
        arrivals = self.schedule.arrivals
        threads = {arrivals[i][1] for i in range(self.arrived) if i not in self.done}
        return sorted(t for t in threads if self.partition_of(t) in member.owned)

    def next_of(self, member: Member, thread: int) -> int | None:
        """The thread's first message not done, if ``member`` still owns its partition."""
        if not member.owns(self.partition_of(thread)) or member.paused:
            return None
        arrivals = self.schedule.arrivals
        return next(
            (i for i in range(self.arrived) if arrivals[i][1] == thread and i not in self.done),
            None,
        )

    # -- the group -------------------------------------------------------------------

    def join(self) -> Member:
        self._names += 1
        member = Member(self, f"w{self._names}")
        self.members.append(member)
        self.trace(member.name, "started")
        return member

    def live(self) -> list[Member]:
        return [m for m in self.members if not m.dead and not m.paused]

    def rebalance(self, reason: str) -> None:
        self.generation += 1
        generation = self.generation
        self.owners = {}
        self.trace("group", f"rebalance to generation {generation}: {reason}")
        candidates = self.live()
        for member in candidates:
            member.revoke()
        if not candidates:
            return
        order = list(range(self.schedule.partitions))
        self.rng.shuffle(order)
        plan: dict[Member, set[int]] = {m: set() for m in candidates}
        for n, partition in enumerate(order):
            plan[candidates[n % len(candidates)]].add(partition)

        def complete(member: Member, partitions: frozenset[int]) -> None:
            if self.generation != generation or member.dead:
                return
            if member.paused:  # it reads the group's answer when it runs again
                member.on_resume = lambda: complete(member, partitions)
                return
            for partition in partitions:
                self.owners[partition] = member
            member.assigned(generation, partitions)

        for member, partitions in plan.items():
            # each member's rebalance completes a moment apart from the others'
            at = DRAIN_GRACE_S + self.rng.uniform(0.2, 2.0)
            self.loop.call_later(at, complete, member, frozenset(partitions))

    def arrive(self, index: int) -> None:
        # two arrivals at one instant may run in either order (the loop's timer heap)
        self.arrived = max(self.arrived, index + 1)
        partition = self.partition_of(self.schedule.arrivals[index][1])
        owner = self.owners.get(partition)
        if owner is not None:
            owner.fetch()

    def play(self, fault: Fault) -> None:
        kind, arg = fault.kind, fault.arg
        live = self.live()
        target = live[self.rng.randrange(len(live))] if live else None
        self.trace("fault", f"{kind} {arg:.3f}")
        if kind == "kill" and target is not None:
            target.dead = True
            target.revoke()
            target.resume()
            self.loop.call_later(arg, self._restart)
            self.loop.call_later(SESSION_S, self.rebalance, f"{target.name}'s session expired")
        elif kind == "pause" and target is not None:
            target.pause()
            if arg > SESSION_S:
                self.loop.call_later(SESSION_S, self.rebalance, f"{target.name} paused")
            self.loop.call_later(arg, self._resume, target)
        elif kind == "join":
            self.join()
            self.rebalance("a member joined")
        elif kind == "leave" and target is not None and len(live) > 1:
            target.dead = True
            target.revoke()
            self.rebalance(f"{target.name} left")
        elif kind == "rebalance":
            self.rebalance("a rebalance")
        elif kind == "model_429":
            self.model.faults.throttle_next += int(arg)
        elif kind == "model_fail":
            self.model.faults.fail_next += int(arg)
        elif kind == "model_hang":
            self.model.faults.hang_next += int(arg)

    def _restart(self) -> None:
        self.join()
        self.rebalance("a member restarted")

    def _resume(self, member: Member) -> None:
        member.resume()
        self.trace(member.name, "resumed")
        later, member.on_resume = member.on_resume, None
        if later is not None:
            later()
        if member.generation != self.generation:
            member.revoke()  # it learns its generation ended: a zombie drains, rejoins
            self.rebalance(f"{member.name} rejoined")
        else:
            member.fetch()

    def busy(self) -> bool:
        return len(self.done) < len(self.schedule.arrivals)

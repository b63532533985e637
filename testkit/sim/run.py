"""Play a schedule in a world and judge its end: :func:`run_schedule`."""

from __future__ import annotations

import asyncio
import gc
import random
from dataclasses import dataclass, field
from functools import cached_property

from testkit.invariants import Verdict, Violation, check
from testkit.sim.schedule import Schedule
from testkit.sim.world import World, _lifecycle, line


@dataclass(frozen=True)
class Result:
    seed: int
    verdict: Verdict
    #: the trace's events as (virtual time, who, what); :attr:`events` prints them
    trace: tuple[tuple[float, str, object], ...]
    errors: tuple[str, ...]
    settled: bool
    virtual_s: float
    #: reply key -> message id, to find a key's events in the trace
    message_of: dict[str, str] = field(default_factory=dict, compare=False)
    #: the mail API ignored keys in this schedule
    keys_ignored: bool = False
    #: messages an email answered that its sender sent after it lost the partition
    stale_sends: frozenset[str] = frozenset()
    #: messages an email answered that took effect after its sender gave up on it, or whose
    #: reply was recorded *failed* by a member cut off from the mail API (it could not read
    #: the thread for the email)
    late_sends: frozenset[str] = frozenset()

    @cached_property
    def events(self) -> tuple[str, ...]:
        """The trace, a line an event (formatted when first read: most runs never read it)."""
        return tuple(map(line, self.trace))

    def _message(self, violation: Violation) -> str:
        subject = violation.subject.split(" in ")[0]
        return self.message_of.get(subject, subject)

    def _in_window(self, violation: Violation) -> bool:
        """The window docs/guarantees.md names: a send whose fence check passed before its
        member lost the partition. With keys ignored, two emails for a message; with keys
        honoured or not, the one email of a reply the next owner gave up on meanwhile (its
        sends failed, it found no email in the thread, recorded *failed* and dead-lettered
        it: the letter's retry finds the email by its key), :attr:`gave_up`. The same two
        faces for an email that took effect after its sender gave up on it, its request held
        by a cut from the mail API past the client's timeout (:attr:`late`)."""
        message = self._message(violation)
        stale = message in self.stale_sends or message in self.late_sends
        doubled = self.keys_ignored and violation.invariant == "never_doubled"
        return stale and (doubled or self._gave_up(violation))

    @staticmethod
    def _gave_up(violation: Violation) -> bool:
        return violation.invariant == "ledger_agrees" and violation.detail.endswith("failed")

    @property
    def late(self) -> bool:
        """A window hit by an email that took effect after its sender gave up on it (a
        worker cut off from the mail API), stale or not (in :attr:`window_hits`)."""
        return any(self._message(v) in self.late_sends for v in self.window_hits)

    @property
    def gave_up(self) -> bool:
        """A stale send's email beside a reply recorded *failed* (in :attr:`window_hits`)."""
        late = self.late_sends
        return any(self._gave_up(v) and self._message(v) not in late for v in self.window_hits)

    @property
    def violations(self) -> list[Violation]:
        """Every broken invariant but the fence's window's (:attr:`window_hits`)."""
        return [v for v in self.verdict.violations if not self._in_window(v)]

    @property
    def window_hits(self) -> list[Violation]:
        return [v for v in self.verdict.violations if self._in_window(v)]

    @property
    def passed(self) -> bool:
        return not self.violations and not self.errors and self.settled

    def problems(self) -> list[str]:
        found = [str(v) for v in self.violations]
        found += [f"uncaught: {e}" for e in self.errors]
        if not self.settled:
            found.append("unsettled: the schedule did not settle before its deadline")
        return found

    def report(self, around: int = 40) -> str:
        """The seed, each broken invariant, and the trace events about its subject."""
        lines = [f"seed {self.seed}: {len(self.problems())} problem(s)"]
        lines += [f"  {problem}" for problem in self.problems()]
        for violation in self.violations[:3]:
            subject = self._message(violation)
            related = [e for e in self.events if subject in e or _lifecycle(e)]
            lines.append(f"  -- trace events naming {subject} --")
            lines += [f"  {e}" for e in related[-around:]]
        return "\n".join(lines)


async def _play(schedule: Schedule) -> Result:
    world = World(schedule)
    loop = world.loop
    for slot in ("a", "b"):
        world.start(slot)
    world.rebalance("the group formed")
    world.pending = len(schedule.messages) + len(schedule.faults)

    def arrival(index: int) -> None:
        world.pending -= 1
        message = schedule.messages[index]
        world.arrive(message, message.text or "")  # "message 12" for <m12@sim>

    def fault(index: int) -> None:
        world.pending -= 1
        world.play(schedule.faults[index])

    for index, at in enumerate(schedule.arrivals):
        loop.call_at(at, arrival, index)
    for index, planned in enumerate(schedule.faults):
        loop.call_at(planned.at, fault, index)
    for at in world.cleaner.moments(schedule.end):
        loop.call_at(at, world.cleaner.clean)
    deadline = schedule.end + 6 * 3600
    while (world.busy() or not world.catch_ups.finished) and loop.time() < deadline:
        if world.pending == 0:
            world.catch_ups.final()  # the operator's catch-up after the last event
            if world.operator is not None:
                world.operator.sweep()  # every draft gets a decision, at the end
        await asyncio.sleep(5.0)
    settled = not world.busy()
    verdict = check(world.observed())
    return Result(
        schedule.seed,
        verdict,
        tuple(world.events),
        tuple(world.errors),
        settled,
        loop.time(),
        {m.key: m.message_id for m in schedule.messages},
        schedule.ignore_keys,
        frozenset(e.replied_to for e in world.mail.outbox if e.stale),
        frozenset(e.replied_to for e in world.mail.outbox if e.late) | world.failed_unread,
    )


def run_schedule(schedule: Schedule) -> Result:
    """Play ``schedule`` on a fresh virtual loop, seeded; judge its end."""
    from testkit.sim.loop import run

    random.seed(schedule.seed)  # tenacity's jitter reads the global random
    # no cyclic collection during the run, one of what it left after: the collector's
    # passes took ~12 % of a run's CPU, each walking the live world again. A full pass, over
    # what came after the frozen start-up only: a young-generation pass promoted each run's
    # cycles (~1,000 objects, 0.4 MB) to generations no pass reached again, and a process
    # of make sim grew by 2 GB over 5,000 schedules
    _freeze_start_up()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return run(_play(schedule))
    finally:
        if enabled:
            gc.enable()
        gc.collect()


_frozen: list[bool] = []


def _freeze_start_up() -> None:
    """Once a process: what the imports made, out of every collection (gc.freeze). Asked
    of a flag, not of ``gc.get_freeze_count()``, which walks the whole frozen list (8 % of
    a schedule's CPU when asked before each one)."""
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen.append(True)

"""Play a schedule in a world and judge its end: :func:`run_schedule`."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from testkit.invariants import Verdict, Violation, check
from testkit.sim.schedule import Schedule
from testkit.sim.world import World, _lifecycle


@dataclass(frozen=True)
class Result:
    seed: int
    verdict: Verdict
    events: tuple[str, ...]
    errors: tuple[str, ...]
    settled: bool
    virtual_s: float
    #: reply key -> message id, to find a key's events in the trace
    message_of: dict[str, str] = field(default_factory=dict, compare=False)

    def _message(self, violation: Violation) -> str:
        subject = violation.subject.split(" in ")[0]
        return self.message_of.get(subject, subject)

    @property
    def violations(self) -> list[Violation]:
        return list(self.verdict.violations)

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
        world.arrive(schedule.messages[index], f"message {index}")

    def fault(index: int) -> None:
        world.pending -= 1
        world.play(schedule.faults[index])

    for index, at in enumerate(schedule.arrivals):
        loop.call_at(at, arrival, index)
    for index, planned in enumerate(schedule.faults):
        loop.call_at(planned.at, fault, index)
    deadline = schedule.end + 6 * 3600
    while world.busy() and loop.time() < deadline:
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
    )


def run_schedule(schedule: Schedule) -> Result:
    """Play ``schedule`` on a fresh virtual loop, seeded; judge its end."""
    from testkit.sim.loop import run

    random.seed(schedule.seed)  # tenacity's jitter reads the global random
    return run(_play(schedule))

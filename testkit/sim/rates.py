"""The group's rate, simulated: several partitions shared by a changing group of workers.

``ONCEONLY_MODEL_RPM`` holds for the whole consumer group: each worker paces its writer
calls at the share of the deliveries partitions it owns (``owned_share``, set at every
rebalance; :mod:`onceonly.processors.flow.admission`). Whether the group's calls stay
within the limit depends on who owns what when: rebalances, a worker killed and
restarted, one paused past its session and waking as a zombie, one joining or leaving,
and the model's 429s and hangs. The one-partition world of :mod:`testkit.sim.world`
cannot show it (one owner, the whole share), so this world has 2-12 partitions and 2-4
workers.

What runs is the product's flow control: each worker's real
:class:`~onceonly.processors.writer.runner.Writer` (retries, timeouts, the 429 pause)
with its real :class:`~onceonly.processors.flow.admission.Admission` and
:class:`~onceonly.processors.flow.rate.Limits`, its share set as
``lifecycle.share_model_budget`` sets it, on the virtual clock. What the world imitates:
the group's eager rebalance (every member's partitions revoked, a drain of
``DRAIN_GRACE_S`` in which running lanes go on, then the new assignment, each member's
completing a moment apart), a lane per thread calling the writer for each message in
turn, offsets committed as messages finish. The verdict is
:func:`testkit.invariants.check`'s ``within_rate`` (no 60 s with more calls started than
the rpm) and that every message's call ended.

Planted bug (h), ``RateSchedule(seed, per_worker=True)``: each worker takes the whole
rate (share 1), as a limit checked per worker would.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from testkit.invariants import Observed, Verdict, check
from testkit.sim.rate_group import Group
from testkit.sim.schedule import Fault, draw_arg
from testkit.sim.world import line

SPAN_S = 600.0  #: messages arrive over this much virtual time
KINDS = ("kill", "pause", "join", "leave", "rebalance", "model_429", "model_fail", "model_hang")


@dataclass(frozen=True)
class RateSchedule:
    """Everything a rate run does, drawn from ``random.Random(seed)``."""

    seed: int
    per_worker: bool = False  #: planted bug (h): each worker takes the group's whole rate
    partitions: int = field(init=False)
    members: int = field(init=False)
    rpm: int = field(init=False)
    #: (virtual time, thread) of each message, in arrival order
    arrivals: tuple[tuple[float, int], ...] = field(init=False)
    faults: tuple[Fault, ...] = field(init=False)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        set_ = object.__setattr__
        set_(self, "partitions", rng.randint(2, 12))
        set_(self, "members", rng.randint(2, 4))
        # at least a call a minute for each partition: where the docs say the rate holds
        # exactly (below it each worker still makes one a minute, docs/flow-control.md)
        set_(self, "rpm", max(rng.randint(6, 240), self.partitions))
        threads = rng.randint(10, 60)
        arrivals: list[tuple[float, int]] = []
        for _ in range(rng.randint(2, 4)):  # floods, each over a few seconds to a minute
            at, spread = rng.uniform(0.0, SPAN_S), rng.uniform(1.0, 60.0)
            for _ in range(rng.randint(25, 80)):  # at least 50 messages in all
                arrivals.append((round(at + rng.uniform(0.0, spread), 3), rng.randrange(threads)))
        set_(self, "arrivals", tuple(sorted(arrivals)))
        faults = [
            Fault(round(rng.uniform(0.0, SPAN_S * 1.2), 3), kind, _arg(rng, kind))
            for kind in (rng.choice(KINDS) for _ in range(rng.randint(5, 9)))
        ]
        set_(self, "faults", tuple(sorted(faults, key=lambda f: (f.at, f.kind, f.arg))))


def _arg(rng: random.Random, kind: str) -> float:
    """As the reply world draws each kind's argument, but 1-4 429s (the model's own)."""
    if kind == "model_429":
        return float(rng.randint(1, 4))
    return draw_arg(rng, kind)


@dataclass(frozen=True)
class RateResult:
    seed: int
    #: the group's calls judged without those a zombie started (:attr:`window_hit`)
    verdict: Verdict
    settled: bool
    calls: int
    events: Sequence[tuple[float, str, str]]
    errors: tuple[str, ...] = ()
    #: the rate held only without the calls a zombie sent once it ran again: a worker that
    #: froze between a call's admission and its request, past its session (the one window
    #: left, docs/flow-control.md)
    window_hit: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict.passed and self.settled and not self.errors

    def problems(self) -> list[str]:
        found = [str(v) for v in self.verdict.violations]
        found += [f"uncaught: {e}" for e in self.errors]
        if not self.settled:
            found.append("unsettled: a message's call never ended")
        return found

    def report(self, around: int = 30) -> str:
        problems = self.problems()
        lines = [f"rate seed {self.seed}: {len(problems)} problem(s)"]
        lines += [f"  {p}" for p in problems]
        lines += [f"  {line(event)}" for event in self.events[-around:]]
        return "\n".join(lines)


async def _play(schedule: RateSchedule) -> RateResult:
    world = Group(schedule)
    loop = world.loop
    for _ in range(schedule.members):
        world.join()
    world.rebalance("the group formed")
    for index, (at, _thread) in enumerate(schedule.arrivals):
        loop.call_at(at, world.arrive, index)
    for fault in schedule.faults:
        loop.call_at(fault.at, world.play, fault)
    deadline = SPAN_S * 1.2 + 24 * 3600
    last = max(fault.at for fault in schedule.faults)
    while (world.busy() or loop.time() < last) and loop.time() < deadline:
        await asyncio.sleep(5.0)

    def judged(starts: Sequence[float]) -> Verdict:
        rpm = float(schedule.rpm)
        return check(Observed((), (), {}, writer_starts=tuple(starts), rpm=rpm))

    every = judged(world.model.starts)
    verdict = every
    if not every.passed and world.zombie_starts:
        zombie = Counter(world.zombie_starts)
        others = [at for at in world.model.starts if not _take(zombie, at)]
        verdict = judged(others)
    return RateResult(
        schedule.seed,
        verdict,
        not world.busy(),
        len(world.model.starts),
        world.events,
        tuple(world.errors),
        window_hit=verdict.passed and not every.passed,
    )


def _take(counts: Counter[float], at: float) -> bool:
    if counts[at] > 0:
        counts[at] -= 1
        return True
    return False


def run_rates(schedule: RateSchedule) -> RateResult:
    """Play ``schedule`` on a fresh virtual loop, seeded; judge it."""
    from testkit.sim.loop import run

    random.seed(schedule.seed)  # tenacity's jitter reads the global random
    return run(_play(schedule))

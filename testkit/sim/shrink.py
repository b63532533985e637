"""The smallest schedule that still fails: :func:`shrink`, and the spec that replays it.

A failing schedule is shrunk by leaving things out of it, one at a time, delta-debugging
style: each fault but the people's ``decide`` events, then each thread's messages, then
each message, then each ``decide`` event. A removal is kept when the schedule without it
still fails the same way (the same invariant, or ``uncaught``, or ``unsettled``); the passes
repeat until one keeps none, so no single fault, message or decision can go and the failure
stay (1-minimal), or until ``max_runs`` runs are spent.

Everything is drawn from the seed's generators as before and only then left out
(``Schedule.drop_faults``, ``Schedule.drop_messages``), so a shrunk schedule is a
sub-schedule of the seed's: the messages, arrivals and faults it keeps are the seed's own.
Its spec names the seed and what was dropped, indices as the full schedule numbers them
(``<m12@sim>`` is ``m12``; ``f3`` is the seed's fourth fault in time, decisions counted):
``85:-f0..2,-f5,-m0..11,-m13`` (:func:`spec_of`, :func:`from_spec`; ``python -m testkit.sim
--only SPEC`` replays it). Deterministic: the same seed shrinks to the same schedule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields

from testkit.sim.approvals import VARIANTS
from testkit.sim.broker import Broker
from testkit.sim.run import Result, run_schedule
from testkit.sim.schedule import Bugs, Reorder, Replays, Schedule

#: runs a shrink may take unless told otherwise (a schedule runs in ~0.1 s of CPU)
MAX_RUNS = 300
NO_BUGS = Bugs()
_ITEM = re.compile(r"-([fm])(\d+)(?:\.\.(\d+))?")


class NothingToShrink(ValueError):
    """The schedule passes, or does not fail the way asked."""


class _Spent(Exception):
    """The run budget is spent."""


# -- the spec ----------------------------------------------------------------------------


def _ranges(indices: Iterable[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for i in sorted(indices):
        if spans and spans[-1][1] == i - 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return spans


def spec_of(schedule: Schedule) -> str:
    """``seed:-f..,-m..``: the seed, and the faults and messages left out of it."""
    items = [
        f"-{letter}{a}" if a == b else f"-{letter}{a}..{b}"
        for letter, dropped in (("f", schedule.drop_faults), ("m", schedule.drop_messages))
        for a, b in _ranges(dropped)
    ]
    return f"{schedule.seed}:{','.join(items)}" if items else str(schedule.seed)


def parse_spec(spec: str) -> tuple[int, frozenset[int], frozenset[int]]:
    """The seed, the dropped faults and the dropped messages a spec names."""
    seed, _, rest = spec.strip().partition(":")
    dropped: dict[str, set[int]] = {"f": set(), "m": set()}
    try:
        number = int(seed)
    except ValueError:
        raise ValueError(
            f"spec {spec!r}: {seed!r} is not a seed; write SEED[:-f3,-m0..11]"
        ) from None
    for item in filter(None, rest.split(",")):
        found = _ITEM.fullmatch(item.strip())
        if found is None:
            raise ValueError(
                f"spec {spec!r}: {item!r} is not -fN, -mN or a range -mA..B "
                "(a fault or message left out, numbered as the seed's full schedule)"
            )
        letter, first, last = found.group(1), int(found.group(2)), found.group(3)
        dropped[letter].update(range(first, (int(last) if last else first) + 1))
    return number, frozenset(dropped["f"]), frozenset(dropped["m"])


def from_spec(spec: str, bugs: Bugs = NO_BUGS, require_approval: bool | None = None) -> Schedule:
    """The schedule a spec names; an index past the seed's schedule is refused."""
    seed, faults, messages = parse_spec(spec)
    full = Schedule(seed, bugs, require_approval)
    for letter, dropped, count in (
        ("f", faults, len(full.faults)),
        ("m", messages, len(full.messages)),
    ):
        if dropped and max(dropped) >= count:
            raise ValueError(
                f"spec {spec!r}: seed {seed}'s schedule has {count} "
                f"{'faults' if letter == 'f' else 'messages'} (0 to {count - 1}), "
                f"not {letter}{max(dropped)}; check --bug and --approval are the shrink's"
            )
    return Schedule(seed, bugs, require_approval, drop_faults=faults, drop_messages=messages)


def flags(bugs: Bugs, require_approval: bool | None) -> str:
    """The command-line flags that give ``python -m testkit.sim`` these bugs and approval,
    and the broker's switches as this process has them (``--no-expiries``, ``--no-table-loss``)."""
    out = [f" --bug {f.name.replace('_', '-')}" for f in fields(bugs) if getattr(bugs, f.name)]
    if require_approval is not None:
        out.append(f" --approval {'on' if require_approval else 'off'}")
    out += [] if Broker.expiries else [" --no-expiries"]
    out += [] if Broker.lose_table_writes else [" --no-table-loss"]
    out += [] if Broker.expire_letters else [" --no-letter-expiries"]
    out += [] if Reorder.mode == "drawn" else [f" --window {Reorder.mode}"]
    out += [] if Replays.on else [" --no-replays"]
    return "".join(out)


# -- the search --------------------------------------------------------------------------


def failures(result: Result) -> list[str]:
    """How a run failed, first first: each broken invariant, ``uncaught``, ``unsettled``."""
    kinds = list(dict.fromkeys(v.invariant for v in result.violations))
    kinds += ["uncaught"] if result.errors else []
    kinds += [] if result.settled else ["unsettled"]
    return kinds


@dataclass(frozen=True)
class Shrunk:
    original: Schedule
    schedule: Schedule  #: the smallest schedule found that fails by :attr:`invariant`
    result: Result  #: its run
    invariant: str
    runs: int  #: schedules run, the original's included
    minimal: bool  #: False: the budget ran out before a pass kept no removal

    @property
    def spec(self) -> str:
        return spec_of(self.schedule)


def size(schedule: Schedule) -> int:
    return len(schedule.messages) + len(schedule.faults)


class _Search:
    def __init__(self, schedule: Schedule, invariant: str, max_runs: int, runs: int) -> None:
        self.full = Schedule(schedule.seed, schedule.bugs, schedule.require_approval)
        self.best = schedule
        self.invariant = invariant
        self.max_runs = max_runs
        self.runs = runs
        self.result: Result | None = None

    def drop(self, faults: Iterable[int] = (), messages: Iterable[int] = ()) -> bool:
        """Leave these out too if the schedule still fails without them."""
        best = self.best
        candidate = Schedule(
            best.seed,
            best.bugs,
            best.require_approval,
            drop_faults=best.drop_faults | frozenset(faults),
            drop_messages=best.drop_messages | frozenset(messages),
        )
        if size(candidate) == size(best):
            return False
        if self.runs >= self.max_runs:
            raise _Spent
        self.runs += 1
        result = run_schedule(candidate)
        if self.invariant not in failures(result):
            return False
        self.best, self.result = candidate, result
        return True

    def one_pass(self) -> bool:
        """Try each removal once, in a fixed order; whether any was kept."""
        full, kept = self.full, self.best
        faults = [i for i in range(len(full.faults)) if i not in kept.drop_faults]
        messages = [i for i in range(len(full.messages)) if i not in kept.drop_messages]
        threads: dict[str, list[int]] = {}
        for i in messages:
            threads.setdefault(full.messages[i].thread_id, []).append(i)
        changed = False
        for i in faults:
            if full.faults[i].kind != "decide":
                changed |= self.drop(faults=[i])
        for thread in sorted(threads, key=lambda t: int(t.lstrip("t"))):
            if len(threads[thread]) > 1:
                changed |= self.drop(messages=threads[thread])
        for i in messages:
            changed |= self.drop(messages=[i])
        for i in faults:
            if full.faults[i].kind == "decide":
                changed |= self.drop(faults=[i])
        return changed


def shrink(schedule: Schedule, *, max_runs: int = MAX_RUNS, invariant: str | None = None) -> Shrunk:
    """The smallest sub-schedule of ``schedule`` that still fails by ``invariant`` (by
    default its first failure: the first broken invariant, else uncaught, else unsettled)
    found in at most ``max_runs`` runs. A schedule that passes is refused."""
    result = run_schedule(schedule)
    found = failures(result)
    spec = spec_of(schedule)
    if not found:
        raise NothingToShrink(f"schedule {spec} passes: there is no failure to shrink")
    target = invariant or found[0]
    if target not in found:
        raise NothingToShrink(
            f"schedule {spec} fails by {', '.join(found)}, not {target}: shrink for one of those"
        )
    search = _Search(schedule, target, max_runs, runs=1)
    minimal = True
    try:
        while search.one_pass():
            pass
    except _Spent:
        minimal = False
    best = search.result or result
    return Shrunk(schedule, search.best, best, target, search.runs, minimal)


# -- the report --------------------------------------------------------------------------


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counts(schedule: Schedule) -> str:
    decide = sum(f.kind == "decide" for f in schedule.faults)
    shown = f"{_n(len(schedule.messages), 'message')}, {_n(len(schedule.faults) - decide, 'fault')}"
    return shown + (f", {_n(decide, 'decide event')}" if schedule.approval else "")


def report(shrunk: Shrunk) -> str:
    """What was shrunk, what is left, how to replay it, and the shrunk run's report."""
    small = shrunk.schedule
    full = Schedule(small.seed, small.bugs, small.require_approval)
    how = "1-minimal" if shrunk.minimal else "run budget spent, not minimal"
    lines = [
        f"seed {small.seed} fails by {shrunk.invariant}; shrunk in {shrunk.runs} runs ({how})",
        f"  from {_counts(shrunk.original)} to {_counts(small)}",
        f"  spec {shrunk.spec}",
        f"  replay: python -m testkit.sim --only {shrunk.spec}"
        + flags(small.bugs, small.require_approval),
    ]
    numbered = {m.message_id: i for i, m in enumerate(full.messages)}
    threads: dict[str, list[str]] = {}
    for message, at in zip(small.messages, small.arrivals, strict=True):
        index = numbered[message.message_id]
        threads.setdefault(message.thread_id, []).append(f"m{index} at {at:.3f}")
    for thread, shown in sorted(threads.items(), key=lambda item: int(item[0].lstrip("t"))):
        lines.append(f"  thread {thread}: {', '.join(shown)}")
    for i, fault in enumerate(full.faults):
        if i in small.drop_faults:
            continue
        arg = VARIANTS[int(fault.arg)] if fault.kind == "decide" else f"{fault.arg:.3f}"
        lines.append(f"  fault f{i} at {fault.at:.3f}: {fault.kind} {arg}")
    lines.append(shrunk.result.report())
    return "\n".join(lines)

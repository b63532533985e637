"""``python -m testkit.sim --seeds N [--start S|fresh] [--jobs J]``: run N schedules on J
processes, print the rates and every violation with its seed (exit 1 on any); ``--start
fresh`` draws the first seed from the clock and prints it (CI: a new range each run);
``--seed S --trace``: replay one seed's trace; ``--seed S --shrink``: the smallest part of its
schedule that still fails, and the spec that replays it with ``--only SPEC``. ``--rates``: the
same for the group's rate world (:mod:`testkit.sim.rates`) instead of the reply world."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from testkit.sim.broker import Broker
from testkit.sim.rates import RateSchedule, run_rates
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Bugs, Cuts, Reorder, Replays, Schedule
from testkit.sim.shrink import MAX_RUNS, NothingToShrink, flags, from_spec, report, shrink, spec_of
from testkit.sim.world import World, line


def quiet(*, cache: bool = False) -> None:
    """The product's logs off: they cost more than the simulation. ``cache``: each module's
    logger is built once, not on every call (a worker process only: a process that
    configures structlog again later would keep these loggers)."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        cache_logger_on_first_use=cache,
    )


@contextmanager
def quieted() -> Iterator[None]:
    """:func:`quiet` for a while, then structlog's configuration as it was (the tests that
    follow see every level again)."""
    saved = structlog.get_config()
    quiet()
    try:
        yield
    finally:
        structlog.configure(**saved)


def _quiet_worker() -> None:
    quiet(cache=True)


@dataclass(frozen=True)
class Outcome:
    """What a worker process sends back of one schedule."""

    seed: int
    events: int
    report: str | None  # None: passed
    keys_ignored: bool = False
    window: bool = False  #: two emails in the keys-ignored window (not a failure)
    #: a stale send's email beside a reply the next owner gave up on (the same window)
    gave_up: bool = False
    #: an email that took effect after its sender gave up on it (``run.Result.late``)
    late: bool = False


#: the fence's window with a reply given up on (``run.Result.gave_up``), as a range reports it
GAVE_UP = "a stale send's email beside its reply recorded failed (the fence's window)"
#: the same faces of an email its sender gave up on (``run.Result.late``)
LATE = "an email its sender, cut off from the mail API, could not learn of (the late send's window)"

#: one schedule of a range: its seed, the planted bugs, approval (None: as drawn)
Job = tuple[int, Bugs, bool | None]


def _play(job: Job) -> Outcome:
    seed, bugs, required = job
    result = run_schedule(Schedule(seed, bugs, require_approval=required))
    report = None if result.passed else result.report(around=12)
    gave_up, late = result.gave_up, result.late
    window = bool(result.window_hits) and not (gave_up or late)
    return Outcome(seed, len(result.trace), report, result.keys_ignored, window, gave_up, late)


def _play_rates(job: Job) -> Outcome:
    seed, bugs, _ = job
    result = run_rates(RateSchedule(seed, per_worker=bugs.group_rate_per_worker))
    report = None if result.passed else result.report(around=12)
    return Outcome(seed, len(result.events), report, False, result.window_hit)


#: the planted bugs (``Bugs`` fields) and what docs/simulation.md calls them
PLANTED = {
    "no_fence_before_send": "no fence check before the send",
    "ledger_after_send": "the ledger written after the send",
    "commit_before_done": "an offset committed before its work is done",
    "writer_sees_latest_only": "a message covered by a reply whose writer never saw it",
    "approval_applied_twice": "an approval applied twice",
    "dead_letter_no_mac_check": "a dead letter retried without its MAC check",
    "group_rate_per_worker": "the group's rate checked per worker",
}


def _fails(seed: int, bugs: Bugs) -> set[str]:
    """The violations of ``seed`` in its world (the rate world for bug (h))."""
    if bugs.group_rate_per_worker:
        rates = run_rates(RateSchedule(seed, per_worker=True))
        return set(rates.problems())
    return {str(v) for v in run_schedule(Schedule(seed, bugs)).violations}


def seeds_to_catch(bugs: Bugs, start: int, limit: int = 1000) -> int | None:
    """How many seeds from ``start`` until one with ``bugs`` breaks an invariant that the
    same seed without them keeps (a seed that fails without the bug does not count)."""
    for n in range(limit):
        found = _fails(start + n, bugs)
        if found and found - _fails(start + n, Bugs()):
            return n + 1  # a violation the same seed without the bug does not have
    return None


def planted_table(starts: tuple[int, ...] = (0, 100_000, 200_000, 300_000, 400_000)) -> None:
    """The planted-bug table of docs/simulation.md, measured."""
    print("| planted bug | seeds needed from each start | at most |\n|---|---|---|")
    for field, name in PLANTED.items():
        needed = [seeds_to_catch(Bugs(**{field: True}), start) for start in starts]
        shown = ", ".join("not in 1000" if n is None else str(n) for n in needed)
        most = max((n for n in needed if n is not None), default=None)
        print(f"| {name} (`{field.replace('_', '-')}`) | {shown} | {most} |", flush=True)


def _first_seed(start: str) -> int:
    if start == "fresh":
        return int(time.time() * 1000) % 10**9
    return int(start)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m testkit.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many schedules to run")
    parser.add_argument("--start", default="0", help="the first seed, or 'fresh' (the clock)")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run schedules on")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument(
        "--only",
        metavar="SPEC",
        help="replay a shrunk schedule: SEED:-f3,-m0..11 (the seed, the faults and messages "
        "left out), as --shrink prints it",
    )
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="with --seed or --only: the smallest sub-schedule that still fails the same way",
    )
    parser.add_argument(
        "--max-runs", type=int, default=MAX_RUNS, help="with --shrink: at most this many runs"
    )
    parser.add_argument("--invariant", help="with --shrink: keep this failure (default: the first)")
    parser.add_argument("--trace", action="store_true", help="print the replayed seed's trace")
    _drawn_or(
        parser,
        "--approval",
        "approval required as drawn (a quarter of seeds), or off or on: of the seed replayed, "
        "or of every seed of a range",
    )
    parser.add_argument(
        "--planted", action="store_true", help="print the seeds each planted bug needs"
    )
    _broker_options(parser)
    parser.add_argument(
        "--bug",
        choices=[
            "no-fence-before-send",
            "ledger-after-send",
            "keys-ignored",
            "commit-before-done",
            "writer-sees-latest-only",
            "approval-applied-twice",
            "dead-letter-no-mac-check",
            "group-rate-per-worker",
        ],
        help="plant a bug in the simulated world (group-rate-per-worker: in the rate world)",
    )
    parser.add_argument(
        "--rates",
        action="store_true",
        help="the group's rate world (several partitions, a changing group) instead",
    )
    return parser


def _drawn_or(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An option each schedule draws, or sets off or on for every one."""
    parser.add_argument(flag, choices=["drawn", "off", "on"], default="drawn", help=help)


def _switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An option on by default, ``--no-...`` to turn it off."""
    parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=True, help=help)


def _broker_options(parser: argparse.ArgumentParser) -> None:
    _switch(
        parser,
        "--expiries",
        "play the ledger writes' expiries the schedules draw (on; off: drawn, not played)",
    )
    _switch(
        parser, "--table-loss", "lose half the events-table writes made while writes expire (on)"
    )
    _switch(
        parser,
        "--letter-expiries",
        "fail the dead letters produced while writes expire, half of them landed (on)",
    )
    _drawn_or(
        parser,
        "--window",
        "the reorder window: drawn (half the seeds hold deliveries), off (window 0) or on "
        "(every seed holds them)",
    )
    _switch(parser, "--replays", "the operator's replays the schedules draw (on; off: left out)")
    _switch(
        parser,
        "--cuts",
        "members cut off from the broker or the mail API, as the schedules draw them (on; "
        "off: left out)",
    )
    _switch(
        parser,
        "--read-cuts",
        "a cut from the mail API holds thread and message reads too, as it holds sends (on; "
        "off: sends alone, as before finding F43)",
    )
    _switch(
        parser,
        "--same-disk",
        "half the restarts on the killed worker's own disk (on; off: each on a new host)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    quiet()
    Broker.expiries, Broker.lose_table_writes = args.expiries, args.table_loss  # forked jobs too
    Broker.expire_letters = args.letter_expiries
    Reorder.mode, Replays.on = args.window, args.replays
    World.same_disk, Cuts.on, Cuts.reads = args.same_disk, args.cuts, args.read_cuts
    if args.planted:
        planted_table()
        return 0
    bugs = Bugs(**{args.bug.replace("-", "_"): True}) if args.bug else Bugs()
    rates = args.rates or bugs.group_rate_per_worker
    if rates and (args.only is not None or args.shrink):
        parser.error("--rates replays a whole seed: give --seed S, without --only or --shrink")
    if rates and args.seed is not None:
        return _replay_rates(args.seed, bugs, args.trace)
    required = {"drawn": None, "off": False, "on": True}[args.approval]
    if rates and required is not None:
        parser.error("--approval is the reply world's: leave it out with --rates")
    if args.seed is not None or args.only is not None:
        try:
            schedule = _one(args.seed, args.only, bugs, required)
        except ValueError as error:
            parser.error(str(error))
        return _shrink(schedule, args) if args.shrink else _replay(schedule, args.trace)
    if args.shrink:
        parser.error("--shrink shrinks one schedule: give --seed S or --only SPEC")
    first = _first_seed(args.start)
    seeds = range(first, first + args.seeds)
    world = "the rate world: " if rates else ""
    approval = "" if required is None else f", approval {args.approval}"
    print(
        f"{world}seeds {seeds.start} to {seeds.stop - 1} on {args.jobs} process(es){approval}",
        flush=True,
    )
    return _run_range(seeds, bugs, args.jobs, rates, required)


def _one(seed: int | None, only: str | None, bugs: Bugs, required: bool | None) -> Schedule:
    """The one schedule ``--seed`` or ``--only`` names (both: the same seed)."""
    schedule = from_spec(only if only is not None else str(seed), bugs, required)
    if seed is not None and seed != schedule.seed:
        raise ValueError(f"--seed {seed} and --only {only} name two seeds; give one")
    return schedule


def _replay(schedule: Schedule, trace: bool) -> int:
    result = run_schedule(schedule)
    if trace:
        print("\n".join(result.events))
    name = spec_of(schedule)
    print(result.report() if not result.passed else f"seed {name}: passed")
    for hit in result.window_hits:
        print(f"  in the fence's window (not a failure): {hit}")
    return 0 if result.passed else 1


def _replay_rates(seed: int, bugs: Bugs, trace: bool) -> int:
    result = run_rates(RateSchedule(seed, per_worker=bugs.group_rate_per_worker))
    if trace:
        print("\n".join(map(line, result.events)))
    print(result.report(around=0) if not result.passed else f"rate seed {seed}: passed")
    if result.window_hit:
        print("  within the rate only without a frozen worker's calls (not a failure)")
    return 0 if result.passed else 1


def _shrink(schedule: Schedule, args: argparse.Namespace) -> int:
    try:
        shrunk = shrink(schedule, max_runs=args.max_runs, invariant=args.invariant)
    except NothingToShrink as refused:
        print(f"not shrunk: {refused}")
        return 2
    if args.trace:
        print("\n".join(shrunk.result.events))
    print(report(shrunk))
    return 1


def _run_range(
    seeds: range, bugs: Bugs, jobs: int, rates: bool = False, required: bool | None = None
) -> int:
    events = ignored = window = gave_up = late = 0
    failed: list[int] = []
    started = time.perf_counter()
    jobs_of: Iterator[Job] = ((seed, bugs, required) for seed in seeds)
    play = _play_rates if rates else _play
    hit = "two emails in the keys-ignored window"
    if rates:
        hit = "a frozen worker's calls over the rate"
    with multiprocessing.get_context("fork").Pool(jobs, initializer=_quiet_worker) as pool:
        for outcome in pool.imap_unordered(play, jobs_of, chunksize=8):
            events += outcome.events
            ignored += outcome.keys_ignored
            window += outcome.window
            gave_up += outcome.gave_up
            late += outcome.late
            if outcome.late:
                print(f"seed {outcome.seed}: {LATE}", flush=True)
            if outcome.window:
                print(f"seed {outcome.seed}: {hit}", flush=True)
            if outcome.gave_up:
                print(f"seed {outcome.seed}: {GAVE_UP}", flush=True)
            if outcome.report is not None:
                failed.append(outcome.seed)
                print(outcome.report, flush=True)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()[0]
    windows = (
        f"{window} with a frozen worker's calls over the rate (the window left)"
        if rates
        else f"{window} in the keys-ignored window ({window} of {ignored} schedules with keys "
        f"ignored), {gave_up} with {GAVE_UP}, {late} with {LATE}"
    )
    print(
        f"{len(seeds)} schedules in {elapsed:.1f} s: {len(seeds) / elapsed:.1f} schedules/s, "
        f"{events / elapsed:,.0f} events/s (load {load:.2f}); "
        f"{len(failed)} with violations; {windows}"
    )
    if rates:
        for seed in sorted(failed)[:5]:
            print(f"replay it: python -m testkit.sim --rates --seed {seed} --trace")
    else:
        _shrink_hint(sorted(failed), bugs, required)
    return 1 if failed else 0


def _shrink_hint(failed: list[int], bugs: Bugs, required: bool | None, shown: int = 5) -> None:
    """The commands that shrink the first failing seeds (not run here: a shrink takes tens
    to hundreds of runs a seed, and a planted bug fails most seeds of a range)."""
    for seed in failed[:shown]:
        print(f"shrink it: python -m testkit.sim --seed {seed} --shrink{flags(bugs, required)}")
    if len(failed) > shown:
        print(f"  ({len(failed) - shown} more failing seeds; shrink each the same way)")


if __name__ == "__main__":
    sys.exit(main())

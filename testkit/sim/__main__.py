"""``python -m testkit.sim --seeds N [--start S|fresh] [--jobs J]``: run N schedules on J
processes, print the rates and every violation with its seed (exit 1 on any); ``--start
fresh`` draws the first seed from the clock and prints it (CI: a new range each run);
``--seed S --trace``: replay one seed's trace."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass

import structlog

from testkit.sim.run import run_schedule
from testkit.sim.schedule import Bugs, Schedule


def quiet(*, cache: bool = False) -> None:
    """The product's logs off: they cost more than the simulation. ``cache``: each module's
    logger is built once, not on every call (a worker process only: a process that
    configures structlog again later would keep these loggers)."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        cache_logger_on_first_use=cache,
    )


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


def _play(job: tuple[int, Bugs]) -> Outcome:
    seed, bugs = job
    result = run_schedule(Schedule(seed, bugs))
    report = None if result.passed else result.report(around=12)
    window = bool(result.window_hits)
    return Outcome(seed, len(result.trace), report, result.keys_ignored, window)


#: the planted bugs (``Bugs`` fields) and what docs/simulation.md calls them
PLANTED = {
    "no_fence_before_send": "no fence check before the send",
    "ledger_after_send": "the ledger written after the send",
    "commit_before_done": "an offset committed before its work is done",
    "writer_sees_latest_only": "a message covered by a reply whose writer never saw it",
    "approval_applied_twice": "an approval applied twice",
}


def seeds_to_catch(bugs: Bugs, start: int, limit: int = 1000) -> int | None:
    """How many seeds from ``start`` until one with ``bugs`` breaks an invariant that the
    same seed without them keeps (a seed that fails without the bug does not count)."""
    for n in range(limit):
        found = run_schedule(Schedule(start + n, bugs)).violations
        if found and set(found) - set(run_schedule(Schedule(start + n)).violations):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many schedules to run")
    parser.add_argument("--start", default="0", help="the first seed, or 'fresh' (the clock)")
    parser.add_argument("--jobs", type=int, default=1, help="processes to run schedules on")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--trace", action="store_true", help="print the replayed seed's trace")
    parser.add_argument(
        "--approval",
        choices=["drawn", "off", "on"],
        default="drawn",
        help="with --seed: approval required as drawn (a quarter of seeds), or off or on",
    )
    parser.add_argument(
        "--planted", action="store_true", help="print the seeds each planted bug needs"
    )
    parser.add_argument(
        "--bug",
        choices=[
            "no-fence-before-send",
            "ledger-after-send",
            "keys-ignored",
            "commit-before-done",
            "writer-sees-latest-only",
            "approval-applied-twice",
        ],
        help="plant a bug in the simulated world",
    )
    args = parser.parse_args(argv)
    quiet()
    if args.planted:
        planted_table()
        return 0
    bugs = Bugs(
        no_fence_before_send=args.bug == "no-fence-before-send",
        ledger_after_send=args.bug == "ledger-after-send",
        keys_ignored=args.bug == "keys-ignored",
        commit_before_done=args.bug == "commit-before-done",
        writer_sees_latest_only=args.bug == "writer-sees-latest-only",
        approval_applied_twice=args.bug == "approval-applied-twice",
    )
    if args.seed is not None:
        required = {"drawn": None, "off": False, "on": True}[args.approval]
        result = run_schedule(Schedule(args.seed, bugs, require_approval=required))
        if args.trace:
            print("\n".join(result.events))
        print(result.report() if not result.passed else f"seed {args.seed}: passed")
        for hit in result.window_hits:
            print(f"  in the keys-ignored window (not a failure): {hit}")
        return 0 if result.passed else 1
    first = _first_seed(args.start)
    seeds = range(first, first + args.seeds)
    print(f"seeds {seeds.start} to {seeds.stop - 1} on {args.jobs} process(es)", flush=True)
    return _run_range(seeds, bugs, args.jobs)


def _run_range(seeds: range, bugs: Bugs, jobs: int) -> int:
    failed = events = ignored = window = 0
    started = time.perf_counter()
    jobs_of = ((seed, bugs) for seed in seeds)
    with multiprocessing.get_context("fork").Pool(jobs, initializer=_quiet_worker) as pool:
        for outcome in pool.imap_unordered(_play, jobs_of, chunksize=8):
            events += outcome.events
            ignored += outcome.keys_ignored
            window += outcome.window
            if outcome.window:
                print(f"seed {outcome.seed}: two emails in the keys-ignored window", flush=True)
            if outcome.report is not None:
                failed += 1
                print(outcome.report, flush=True)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()[0]
    print(
        f"{len(seeds)} schedules in {elapsed:.1f} s: {len(seeds) / elapsed:.1f} schedules/s, "
        f"{events / elapsed:,.0f} events/s (load {load:.2f}); "
        f"{failed} with violations; {window} in the keys-ignored window "
        f"({window} of {ignored} schedules with keys ignored)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

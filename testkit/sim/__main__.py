"""``python -m testkit.sim --seeds N [--start S]``: run N schedules, print the rates and every
violation with its seed (exit 1 on any); ``--seed S --trace``: replay one seed's trace."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import structlog

from testkit.sim.run import run_schedule
from testkit.sim.schedule import Bugs, Schedule


def quiet() -> None:
    """The product's logs off: they cost more than the simulation."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many schedules to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--trace", action="store_true", help="print the replayed seed's trace")
    parser.add_argument(
        "--bug",
        choices=["no-fence-before-send", "ledger-after-send", "keys-ignored"],
        help="plant a bug in the simulated world",
    )
    args = parser.parse_args(argv)
    quiet()
    bugs = Bugs(
        no_fence_before_send=args.bug == "no-fence-before-send",
        ledger_after_send=args.bug == "ledger-after-send",
        keys_ignored=args.bug == "keys-ignored",
    )
    if args.seed is not None:
        result = run_schedule(Schedule(args.seed, bugs))
        if args.trace:
            print("\n".join(result.events))
        print(result.report() if not result.passed else f"seed {args.seed}: passed")
        return 0 if result.passed else 1
    seeds = range(args.start, args.start + args.seeds)
    failed = 0
    events = 0
    started = time.perf_counter()
    for seed in seeds:
        result = run_schedule(Schedule(seed, bugs))
        events += len(result.events)
        if not result.passed:
            failed += 1
            print(result.report(around=12), flush=True)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()[0]
    print(
        f"{len(seeds)} schedules in {elapsed:.1f} s: {len(seeds) / elapsed:.1f} schedules/s, "
        f"{events / elapsed:,.0f} events/s (load {load:.2f}); "
        f"{failed} with violations"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

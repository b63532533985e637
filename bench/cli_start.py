"""``python -m bench.cli_start``: the ``onceonly`` command's start, as each operator command
pays it (issue 45: about half a second of each ``trace`` or ``approvals list``), as it
starts now (``python -m onceonly``: structlog imported with rich hidden, ``onceonly._start``)
and as it started before (structlog imported first, rich and all), alternated in one run;
prints the median wall and CPU seconds of each and their ratios."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

from bench._options import Opt, cli

#: the command as an operator runs it, the way it starts now
NOW = [sys.executable, "-m", "onceonly", "trace", "--help"]
#: the same command started as before: structlog (and rich through it) imported first
BEFORE = [
    sys.executable,
    "-c",
    "import sys, structlog.dev; from onceonly.cli import run; "
    "sys.argv = ['onceonly', 'trace', '--help']; run()",
]


def timed(command: list[str]) -> tuple[float, float]:
    """One run of ``command``: its wall seconds and its CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@cli(
    (Opt("--runs", None, 20, "Runs of each, alternated."),),
    "Start the command both ways; print the medians and the ratios now / before.",
)
def main(runs: int) -> None:
    timed(NOW)  # warm the page cache for both
    now, before = [], []
    for _ in range(runs):
        now.append(timed(NOW))
        before.append(timed(BEFORE))
    for name, runs_of in (("now", now), ("before", before)):
        wall = statistics.median(w for w, _ in runs_of)
        cpu = statistics.median(c for _, c in runs_of)
        print(f"{name:7s} wall {wall:.3f} s, CPU {cpu:.3f} s (median of {len(runs_of)})")
    wall_ratio = statistics.median(w for w, _ in now) / statistics.median(w for w, _ in before)
    cpu_ratio = statistics.median(c for _, c in now) / statistics.median(c for _, c in before)
    print(f"now / before: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}")


if __name__ == "__main__":
    main()

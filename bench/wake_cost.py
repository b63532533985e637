"""What waking up costs on this machine: the same work, back to back and after sleeps.

``python -m bench.wake_cost`` times one delivery-sized piece of work (parse a ~2 KB JSON
body, HMAC-SHA256 it, encode it again) by the thread's own CPU clock, 2,000 times after
each of several sleeps, and prints the median. On a shared VM the work costs more after
a sleep than back to back: while the vCPU idled, the host ran other work on its core, and
caches and predictors start cold (on this machine: 1.3-1.6 x after 0.2 ms, 4.6-5 x after
5 ms, with or without the guest's halt polling). A server that sleeps between requests
pays that on each one, which is why ingest's CPU per delivery is higher at a moderate
rate than at its peak (``python -m bench.ingest_latency``).

``--spin`` waits out each gap on the CPU instead of sleeping: if the cost came only from
the vCPU idling, a spinning thread would stay warm. On this machine spinning takes about a
third off and leaves the rest (two runs each: 50-55 µs after 1 ms spinning against 73-76
asleep, 115-118 after 5 ms against 192-203, with 24 back to back): most of the cold start
comes with the time that passed, while the host's other work used the core's caches.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import statistics
import time

import click

_BODY = json.dumps({f"field_{i}": "v" * 20 for i in range(60)}).encode()
_KEY = b"k" * 32


def _work() -> None:
    parsed = json.loads(_BODY)
    hmac.new(_KEY, _BODY, hashlib.sha256).digest()
    json.dumps(parsed)


def wait(gap_s: float, *, spin: bool = False) -> None:
    """Let ``gap_s`` pass: asleep, or (``spin``) on the CPU, reading the clock."""
    if not spin:
        time.sleep(gap_s)
        return
    until = time.perf_counter() + gap_s
    while time.perf_counter() < until:
        pass


def median_cpu_us(gap_s: float, times: int, *, spin: bool = False) -> float:
    """Median thread-CPU µs of :func:`_work`, each run after waiting ``gap_s``
    (:func:`wait`)."""
    spent = []
    for _ in range(times):
        if gap_s:
            wait(gap_s, spin=spin)
        start = time.thread_time_ns()
        _work()
        spent.append(time.thread_time_ns() - start)
    return statistics.median(spent) / 1000


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--times", type=click.IntRange(100, 100_000), default=2000, show_default=True)
@click.option("--spin", is_flag=True, help="Wait out each gap on the CPU instead of sleeping.")
def main(times: int, spin: bool) -> None:
    """The same work's CPU back to back and after gaps of 0.2, 1 and 5 ms."""
    base = median_cpu_us(0.0, times)
    print(f"back to back: {base:.1f} µs")
    how = "spin" if spin else "sleep"
    for gap_ms in (0.2, 1.0, 5.0):
        after = median_cpu_us(gap_ms / 1000, times, spin=spin)
        print(f"after a {gap_ms:g} ms {how}: {after:.1f} µs ({after / base:.2f} x)")


if __name__ == "__main__":
    main()

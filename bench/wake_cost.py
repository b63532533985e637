"""What waking up costs on this machine (``python -m bench.wake_cost``): one delivery-sized
piece of work timed back to back and after sleeps (or ``--spin`` waits); on a shared VM
it costs more after a sleep, which is why ingest's CPU per delivery rises at lower rates."""

from __future__ import annotations

import hashlib
import hmac
import json
import statistics
import time

from bench._options import Int, Opt, cli

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


OPTIONS = (
    Opt("--times", Int(100, 100_000), 2000),
    Opt("--spin", help="Wait out each gap on the CPU instead of sleeping.", flag=True),
)


@cli(OPTIONS, "The same work's CPU back to back and after gaps of 0.2, 1 and 5 ms.")
def main(times: int, spin: bool) -> None:
    base = median_cpu_us(0.0, times)
    print(f"back to back: {base:.1f} µs")
    how = "spin" if spin else "sleep"
    for gap_ms in (0.2, 1.0, 5.0):
        after = median_cpu_us(gap_ms / 1000, times, spin=spin)
        print(f"after a {gap_ms:g} ms {how}: {after:.1f} µs ({after / base:.2f} x)")


if __name__ == "__main__":
    main()

"""Flow-control benchmark (``python -m bench.flow``, ``make bench-flow``): (A) the group's
rate limit, (B) the model's 429s with Retry-After, (C) fairness between two tenants; real
workers with the openai writer against the local model server. Report:
``<--out>/flow-<date>.md``; the targets are in docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from pathlib import Path

from bench import _once
from bench._flow_stack import Stack
from bench._load import per_second, percentile
from bench._options import Opt, Values
from bench._proc_stack import histogram_mean, scrape
from bench._procs import Broker, console
from bench._report import met
from bench._runner import Scenario, command
from testkit.invariants import most_in_window as most_in_window  # the checker's own


def gaps(times: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sorted(times))]


def probes_in_pause(
    refused: Sequence[float], first_answer: float, until: float, settle_s: float = 0.5
) -> list[float]:
    """The 429s after the calls in flight at the first 429 came back (``settle_s`` after
    it) and before the throttle ended: what the pause let through."""
    return [at for at in refused if first_answer + settle_s < at < until]


async def run_rate(opts: Values, stack: Stack) -> list[str]:
    """(A): the group's RPM over ``--workers`` workers."""
    stack.chat.latency_s = opts.latency_s
    for _ in range(opts.workers):
        stack.worker(ONCEONLY_MODEL_RPM=f"{opts.rpm:g}", ONCEONLY_REORDER_WINDOW_MS="0")
    await stack.wait_shares(1 / opts.workers)
    acked = await stack.deliver("rate@bench.example", [f"r{n}" for n in range(opts.messages)])
    budget_s = opts.messages / (opts.rpm / 60) * 1.5 + 120
    answered = await stack.answered(set(acked), budget_s)
    calls = [at for at, status in stack.chat.calls if status == 200]
    most = most_in_window(calls, 60.0)
    call_rate, reply_rate = per_second(calls), per_second(answered.values())
    per_s = opts.rpm / 60
    twice = _once.doubled(_once.verdict(acked, stack.sent_to()))
    ok_window = most <= opts.rpm
    ok_rate = reply_rate >= 0.9 * per_s
    return [
        f"## (A) The group's rate: {opts.workers} workers, ONCEONLY_MODEL_RPM={opts.rpm:g}, "
        f"a {opts.latency_s:g} s model, {opts.messages} messages at once",
        "",
        "| figure | value | target | met |",
        "| --- | --- | --- | --- |",
        f"| most model calls in any 60 s window | {most} | <= {opts.rpm:g} | {met(ok_window)} |",
        f"| model calls a second, first to last | {call_rate:.2f} | {per_s:g} +- 10 % | "
        f"{met(abs(call_rate - per_s) <= 0.1 * per_s)} |",
        f"| replies a second, first to last | {reply_rate:.2f} | >= {0.9 * per_s:.2f} | "
        f"{met(ok_rate)} |",
        f"| answered / answered twice | {len(answered)} / {twice} | {opts.messages} / 0 | "
        f"{met(len(answered) == opts.messages and twice == 0)} |",
        "",
    ]


async def run_throttle(opts: Values, stack: Stack) -> list[str]:
    """(B): a model that answers 429 with Retry-After for a while."""
    stack.chat.latency_s = 0.1
    stack.worker(ONCEONLY_REORDER_WINDOW_MS="0")
    await stack.wait_shares(1.0)
    stack.chat.throttle(opts.throttle_s, opts.retry_after_s)
    until = time.monotonic() + opts.throttle_s
    names = [f"q{n}" for n in range(opts.throttled_messages)]
    acked = await stack.deliver("throttle@bench.example", names)
    answered = await stack.answered(set(acked), opts.throttle_s + 180)
    refused = [at for at, status in stack.chat.calls if status == 429]
    first_wave = [at for at in refused if at <= refused[0] + 0.5] if refused else []
    probes = probes_in_pause(refused, refused[0], until) if refused else []
    allowed = (until - refused[0]) / opts.retry_after_s + 1 if refused else 0
    spacing = min(gaps(probes), default=float("nan"))
    twice = _once.doubled(_once.verdict(acked, stack.sent_to()))
    return [
        f"## (B) 429 with Retry-After: {opts.retry_after_s:g} for {opts.throttle_s:g} s, "
        f"{opts.throttled_messages} messages, one worker",
        "",
        "| figure | value | target | met |",
        "| --- | --- | --- | --- |",
        f"| calls in flight when the first 429 came back (answered 429) | {len(first_wave)} | "
        "(not limited: they had started) | |",
        f"| calls after those, while the model still refused | {len(probes)} | "
        f"<= {allowed:.0f} (one per {opts.retry_after_s:g} s) | "
        f"{met(len(probes) <= allowed)} |",
        f"| shortest gap between those calls | {spacing:.2f} s | >= {opts.retry_after_s:g} s | "
        f"{met(not probes or spacing >= opts.retry_after_s * 0.95)} |",
        f"| answered / answered twice | {len(answered)} / {twice} | "
        f"{opts.throttled_messages} / 0 | "
        f"{met(len(answered) == opts.throttled_messages and twice == 0)} |",
        "",
    ]


async def run_fairness(opts: Values, stack: Stack) -> list[str]:
    """(C): tenant A's flood against tenant B's few messages, twice: B posts once A's
    first replies are out (A's records may still be being read), and once the worker has
    taken all of A's records (A's flood waits for the model)."""
    stack.chat.latency_s = opts.flood_latency_s
    stack.worker(
        ONCEONLY_REORDER_WINDOW_MS=str(opts.window_ms),
        ONCEONLY_WRITER_CONCURRENCY=str(opts.concurrency),
        ONCEONLY_MAX_PENDING=str(max(4096, 2 * (opts.flood + opts.tenant_b))),
    )
    await stack.wait_shares(1.0)
    started = time.monotonic()
    flood = asyncio.ensure_future(
        stack.deliver("a@bench.example", [f"a{n}" for n in range(opts.flood)])
    )
    a_ids = {f"<a{n}@bench.example>" for n in range(opts.flood)}
    seen_a: dict[str, float] = {}
    while len(seen_a) < opts.concurrency * 2:  # A's flood is being answered
        await stack.answered(a_ids, 0.2, seen_a)
    early = await _tenant_b(stack, "b", opts, seen_a)
    await flood

    def all_read() -> bool:
        pending = (scrape(stack.ports[0]) or {}).get("onceonly_pending_records", 0.0)
        return pending + len(seen_a) >= opts.flood

    while not all_read():
        await stack.answered(a_ids, 0.5, seen_a)
    read = await _tenant_b(stack, "c", opts, seen_a)
    budget = opts.flood / (opts.concurrency / opts.flood_latency_s) * 3 + 120
    await stack.answered(a_ids, budget, seen_a)
    drain = max(seen_a.values(), default=started) - started
    written = stack.written_at()  # B's texts recorded: the writer's part of the wait
    metrics = scrape(stack.ports[0]) or {}
    target = opts.window_ms / 1000 + 2 * opts.flood_latency_s + 1
    everyone = a_ids | early[0].keys() | read[0].keys()
    return [
        f"## (C) Fairness: tenant A floods {opts.flood} messages, tenant B posts "
        f"{opts.tenant_b} during it, twice; one worker at concurrency {opts.concurrency}, a "
        f"{opts.flood_latency_s:g} s model, window {opts.window_ms} ms",
        "",
        "| figure | value | target | met |",
        "| --- | --- | --- | --- |",
        *_b_rows("B once A's first replies are out", early, written, target, opts),
        *_b_rows("B once the worker took all of A's records", read, written, target, opts),
        f"| A answered in all | {len(seen_a)} (in {drain:.0f} s) | {opts.flood} | "
        f"{met(len(seen_a) == opts.flood)} |",
        f"| answered twice | {_once.doubled(_once.verdict(everyone, stack.sent_to()))} | 0 | |",
        f"| worker: mean writer call / mean wait for admission | "
        f"{histogram_mean(metrics, 'onceonly_writer_seconds'):.2f} / "
        f"{histogram_mean(metrics, 'onceonly_writer_admission_wait_seconds'):.2f} s | | |",
        "",
    ]


Posted = tuple[dict[str, float], dict[str, float], int]


async def _tenant_b(stack: Stack, prefix: str, opts: Values, seen_a: dict[str, float]) -> Posted:
    """B's messages: when each was acked, when each was answered, A's replies by then."""
    names = [f"{prefix}{n}" for n in range(opts.tenant_b)]
    acked = await stack.deliver("b@bench.example", names)
    return acked, await stack.answered(set(acked), 120), len(seen_a)


def _b_rows(
    label: str, posted: Posted, written: dict[str, float], target: float, opts: Values
) -> list[str]:
    acked, seen, a_then = posted
    waits = [seen[m] - acked[m] for m in seen]
    to_text = [written[m] - acked[m] for m in acked if m in written]
    p99 = percentile(waits, 0.99)
    return [
        f"| {label} (A's replies out then: {a_then}): p50 / p99 / max from produce to "
        f"email | {percentile(waits, 0.5):.2f} / {p99:.2f} / "
        f"{max(waits, default=float('nan')):.2f} s | p99 <= {target:g} s | "
        f"{met(len(waits) == opts.tenant_b and p99 <= target)} |",
        f"| the same, p99 from produce to its text recorded | "
        f"{percentile(to_text, 0.99):.2f} s | | |",
    ]


RUNS = {"rate": run_rate, "throttle": run_throttle, "fairness": run_fairness}


async def run_all(opts: Values, broker: Broker, work: Path) -> list[str]:
    lines: list[str] = []
    for name in opts.runs.split(","):
        body = RUNS[name]
        console.print(f"run {name} …")
        stack = Stack(broker, work, opts.partitions)
        try:
            lines += await body(opts, stack)
        finally:
            stack.close()
        console.print("\n".join(lines[-8:]))
    return lines


def collect(opts: Values, broker: Broker, work: Path) -> list[str]:
    return asyncio.run(run_all(opts, broker, work))


def report_lines(_opts: Values, lines: list[str]) -> list[str]:
    return lines


OPTIONS = (
    Opt("--workers", None, 2),
    Opt("--rpm", float, help="Model calls a minute", sizes=(600.0, 120.0)),
    Opt("--latency", None, 0.5, dest="latency_s"),
    Opt("--messages", int, help="Messages of (A)", sizes=(2000, 120)),
    Opt("--throttle", None, 10.0, dest="throttle_s"),
    Opt("--retry-after", None, 2.0, dest="retry_after_s"),
    Opt("--throttled-messages", int, help="Messages of (B)", sizes=(200, 30)),
    Opt("--concurrency", None, 64),
    Opt("--flood", int, help="Tenant A's messages in (C)", sizes=(5000, 600)),
    Opt("--tenant-b", int, help="Tenant B's messages in (C), twice", sizes=(10, 5)),
    Opt("--window-ms", None, 2000),
    Opt("--flood-latency", None, 1.0, dest="flood_latency_s"),
    Opt("--partitions", None, 8),
    Opt("--runs", None, "rate,throttle,fairness"),
)
FLOW = Scenario(
    "flow",
    "Flow control for the model",
    OPTIONS,
    Values,
    collect,
    report_lines,
    smoke="small sizes: a minute or two",
    note="; see bench/flow.py for what each run does.",
)
main = command(FLOW, "The flow-control benchmark; see the module's docstring.")


if __name__ == "__main__":
    main()

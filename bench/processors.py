"""Processor benchmark (``python -m bench.processors``): (1) a plain faust agent that counts,
(2) ``onceonly worker`` replying to an instant mail server, (3) its RSS with
``--dedupe-entries``, (4) restart-to-first-event after SIGKILL and SIGTERM, (6) cold and
standby takeover (``--takeover-only``: ``make bench-scale``).

Targets: (2)/(1) >= 0.5 and >= 2,000 replies/s; (3) < 300 MB; (6) first answer within 30 s,
every partition within 60 s, 15 s with a standby. Report: ``processors-<date>.md``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from bench._options import PROCESSOR_OPTIONS, ProcessorOptions, with_partitions
from bench._proc_phases import Bench
from bench._proc_records import agentmail_records, fill_changelog, ledger_sent, produce
from bench._proc_report import SDK_CALLS, Results, section
from bench._proc_stack import group_rss_mb
from bench._proc_takeover import probe, run_takeovers, wait_answered
from bench._procs import Broker, console
from bench._report import contended
from bench._runner import Scenario, command
from bench.sdk_cost import sdk_cost_pair


def contention(r: Results) -> str | None:
    drains = [d for d in (r.plain, r.worker, r.memory.drain if r.memory else None) if d]
    return contended(
        (d.cpu.get("other", 0.0) for d in drains),
        "while figures were measured (`other` in the CPU figures)",
        "rates are lower and noisier than on an idle machine; the ms of CPU per event are "
        "the steadier figure",
    )


def _memory_and_restarts(bench: Bench, opts: ProcessorOptions, r: Results, partitions: int) -> None:
    """(3) the RSS with the dedupe entries, then (4) restarts after SIGKILL and SIGTERM."""
    next_n = entries = opts.events
    if not opts.skip_rss:
        console.print(
            f"(3) {opts.dedupe_entries:,} distinct Stripe events, within {opts.rss_budget_s:g} s …"
        )
        r.memory = bench.run_memory(opts.dedupe_entries, entries, opts.rss_budget_s)
        entries = r.memory.entries
        console.print(
            f"(3) RSS {r.memory.rss_mb:.0f} MB (peak {r.memory.hwm_mb:.0f} MB) "
            f"with {entries:,} entries"
        )
    for how in ("SIGKILL", "SIGTERM"):
        console.print(f"(4) restart after {how} …")
        restart = bench.run_restart(how, entries, next_n)
        next_n += 1 + partitions
        entries += 1 + partitions
        r.restarts.append(restart)
        console.print(
            f"(4) first event {restart.first_s:.2f} s, every partition "
            f"{restart.all_partitions_s:.2f} s after the start"
        )
        if how == "SIGKILL" and r.memory is not None and bench.worker is not None:
            r.memory.after_restart_mb = group_rss_mb(bench.worker.pid)[0]


def _takeovers(bench: Bench, opts: ProcessorOptions, r: Results, held: int) -> None:
    """(6) on the running worker: filled up to --takeover-entries, then SIGKILLed."""
    if opts.takeover_entries <= 0:
        return
    if bench.worker is None:  # --takeover-only: a worker of its own
        bench.start_mail()
        bench.start_worker()
    if opts.takeover_entries > held:
        extra = opts.takeover_entries - held
        if opts.takeover_fill == "changelog":
            # the worker answering every partition has made its changelogs (compacted,
            # one partition per deliveries partition): only then write to them
            ids = probe(bench, "fill", list(range(bench.partitions)))
            wait_answered(bench, ids, bench.worker, "(6) the worker answering")
            app_id = bench.worker_env()["ONCEONLY_APP_ID"]
            fill_changelog(bench.bootstrap, app_id, extra, f"{bench.tag}c")
            held += extra
        else:
            console.print(f"(6) {extra:,} more distinct Stripe events for the takeover …")
            held += bench.run_memory(extra, held, math.inf, tag="t").entries - held
    r.takeovers = run_takeovers(bench, held, standby=opts.takeover_standby)
    r.takeover_fill = opts.takeover_fill


def _throughput(bench: Bench, opts: ProcessorOptions, r: Results, partitions: int) -> None:
    """(1), (2), (5), then (3) and (4)."""
    console.print("(1) plain faust agent …")
    r.plain = bench.run_plain(opts.events)
    console.print(f"(1) {r.plain.rate:,.0f} events/s")

    bench.start_mail()
    console.print("(2) onceonly worker, window 0, instant mail server …")
    r.worker = bench.run_replies(opts.events)
    console.print(f"(2) {r.worker.rate:,.0f} replies/s")
    r.replies_metric = bench.worker_metric("onceonly_replies_sent_total", want=opts.events)
    r.replayed = int(bench.mail_stats()["replayed"])
    r.ledger_sent = ledger_sent(bench.bootstrap, bench.topics["ONCEONLY_LEDGER_TOPIC"], partitions)
    console.print(f"(5) the SDK call alone, {SDK_CALLS:,} replies …")
    r.sdk_ms, r.sdk_httpx_ms = sdk_cost_pair(f"http://127.0.0.1:{bench.mail_port}")
    console.print(
        f"(5) {r.sdk_ms:.2f} ms of CPU per reply ({r.sdk_httpx_ms:.2f} the whole httpx way)"
    )
    _memory_and_restarts(bench, opts, r, partitions)


def collect(opts: ProcessorOptions, broker: Broker, work: Path) -> Results:
    """Run the processor benchmark against ``broker``, in ``work``."""
    began, partitions = time.monotonic(), opts.partitions
    r = Results(opts.events, partitions, log_level=opts.log_level)
    bootstrap = broker.bootstrap
    bench = Bench.fresh(broker, work, "processors", partitions, opts.log_level)
    with bench.running():
        held = 0
        if not opts.takeover_only:
            console.print(f"producing {opts.events:,} AgentMail events to {bench.deliveries} …")
            events = agentmail_records(opts.events)
            seconds = produce(bootstrap, bench.deliveries, events, opts.events)
            console.print(f"produced in {seconds:.1f} s")
            _throughput(bench, opts, r, partitions)
            held = r.restarts[-1].entries + 1 + partitions if r.restarts else 0
        _takeovers(bench, opts, r, held)
    if (note := contention(r)) is not None:
        r.notes.append(note)
    r.notes.append(f"the processor benchmark took {time.monotonic() - began:.0f} s")
    return r


PROCESSORS = Scenario(
    "processors",
    "Processor benchmark",
    PROCESSOR_OPTIONS,
    with_partitions,
    collect,
    sections=lambda _opts, results: [section(results)],
)
main = command(
    PROCESSORS,
    """Events/s of a plain faust agent vs onceonly's worker, RSS with many dedupe entries,
    and restart-to-first-event.""",
)


if __name__ == "__main__":
    main()

"""Backlog benchmark (``python -m bench.backlog``, ``make bench-backlog``): a backlog of
large-bodied envelopes produced first, then one worker with a fixed-latency writer drains
it. Targets (issue 29): RSS under 1 GiB, no rebalance, every thread answered once.
Report: ``<--results-dir>/backlog-<date>.md`` and ``.png``. Smoke:
``python -m bench.backlog --threads 2000 --body-kb 50``."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bench._agent_load import AgentBench
from bench._backlog_figures import (
    FENCE_TO_SEND,
    Outcome,
    Plan,
    Sample,
    overlaps,
    rebalances,
)
from bench._backlog_records import backlog_records
from bench._backlog_records import measure as measure_tick
from bench._backlog_report import section
from bench._load import message_id
from bench._model import WRITER_S_ENV
from bench._once import PerMessage
from bench._options import Float, Int, Opt
from bench._proc_records import Record, produce
from bench._proc_stack import check_alive, counters, group_rss_mb, histogram_buckets, poll, scrape
from bench._procs import BenchError, Broker, CpuWindow, console
from bench._runner import Scenario, command, whole_run

#: Seconds between two /metrics readings (the lag gauge asks the broker each time).
SCRAPE_EVERY_S = 5.0
#: Seconds after the last reply before the counts are read: a late second email shows.
SETTLE_S = 5.0
#: What a thread costs on disk, as a multiple of its body: the deliveries topic, the
#: holds changelog and the worker's RocksDB, with room to spare.
DISK_FACTOR = 4
KEPT = ("onceonly_fenced", "onceonly_replies", "onceonly_dead_letters", "onceonly_writer_calls")


def worker_settings(plan: Plan) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "bench._model:fixed",
        WRITER_S_ENV: f"{plan.writer_s:g}",
        "ONCEONLY_REORDER_WINDOW_MS": str(plan.window_ms),
        "ONCEONLY_WRITER_CONCURRENCY": str(plan.concurrency),
        "ONCEONLY_MAX_PENDING": str(plan.max_pending),
    }


def check_disk(plan: Plan, work: Path) -> None:
    need = plan.threads * (plan.body_kb + 2) * 1024 * DISK_FACTOR
    free = shutil.disk_usage(work).free
    if need > free:
        raise BenchError(
            f"{plan.threads:,} threads of {plan.body_kb} KB need about {need / 2**30:.1f} GiB "
            f"free under {work}, which has {free / 2**30:.1f} GiB: ask for fewer --threads"
        )


def produce_backlog(plan: Plan, broker: Broker, topic: str, tag: str) -> tuple[float, float]:
    """Produce the whole backlog; (seconds it took, MB of record values)."""
    produced = [0]

    def counted() -> Iterator[Record]:
        for record in backlog_records(plan.threads, tag, plan.body_kb):
            produced[0] += len(record[1])
            yield record

    console.print(f"producing {plan.threads:,} threads of {plan.body_kb} KB to {topic} …")
    seconds = produce(broker.bootstrap, topic, counted(), plan.threads)
    console.print(f"  {produced[0] / 1e6:,.0f} MB in {seconds:.0f} s")
    return seconds, produced[0] / 1e6


@dataclass(frozen=True, slots=True)
class Limits:
    """How long the drain may take, and where its logs go."""

    stall_s: float  #: fail when neither the replies nor the lag move for this long
    timeout_s: float | None = None  #: stop waiting after this long; report what drained
    keep: Path | None = None  #: copy the logs here


@dataclass(slots=True)
class Watch:
    """What the drain's readings found."""

    samples: list[Sample]
    peak_rss_mb: float = 0.0
    drained: bool = False


def _reading(bench: AgentBench, started: float, replies: int, rss: float) -> Sample:
    found = scrape(bench.worker_port) or {}
    lags = [v for k, v in found.items() if k.startswith("onceonly_consumer_lag{")]
    return Sample(
        time.time() - started,
        replies,
        rss,
        found.get("onceonly_pending_records", math.nan),
        sum(lags) if lags else math.nan,
    )


def watch_drain(bench: AgentBench, plan: Plan, started: float, limits: Limits) -> Watch:
    """Read the mail server's sends and the worker's RSS each second until every thread
    has a reply or the timeout; fail if neither the sends nor the consumer lag move for
    the stall limit."""
    worker = bench.worker
    assert worker is not None
    watch = Watch([])
    stall_s, timeout_s = limits.stall_s, limits.timeout_s or math.inf
    moved, last_move, next_scrape, next_print = (-1, math.nan), time.monotonic(), 0.0, 0.0
    while True:
        sent = bench.sent()
        rss = group_rss_mb(worker.pid)[0]
        watch.peak_rss_mb = max(watch.peak_rss_mb, rss)
        now = time.monotonic()
        if now >= next_scrape or sent >= plan.threads:
            watch.samples.append(_reading(bench, started, sent, rss))
            next_scrape = now + SCRAPE_EVERY_S
            progress = (sent, watch.samples[-1].lag)
            if progress != moved and not (progress[0] == moved[0] and math.isnan(progress[1])):
                moved, last_move = progress, now
        if sent >= plan.threads:
            watch.drained = True
            return watch
        if time.time() - started > timeout_s:
            console.print(f"[red]timed out: {sent:,} of {plan.threads:,} replies[/]")
            watch.samples.append(_reading(bench, started, sent, rss))
            return watch
        if now - last_move > stall_s:
            raise BenchError(
                f"the drain is stuck at {sent:,} of {plan.threads:,} replies for {stall_s:g} s; "
                f"worker output:\n{worker.log_tail()}"
            )
        check_alive(worker, "the backlog drained")
        if now >= next_print:
            s = watch.samples[-1]
            console.print(
                f"  {time.time() - started:6.0f} s: {sent:,} replies, RSS {rss:,.0f} MiB, "
                f"pending {s.pending:g}, lag {s.lag:g}"
            )
            next_print = now + 30
        time.sleep(1.0)


def final_counters(bench: AgentBench) -> dict[str, float]:
    """The worker's /metrics at the end (waits up to 30 s for an answer)."""
    found = poll(lambda: scrape(bench.worker_port), lambda found: found is not None, 30, 0.5)
    if found is None:
        raise BenchError(f"the worker's /metrics did not answer on port {bench.worker_port}")
    return found


def copy_logs(work: Path, keep: Path | None) -> None:
    """Copy the run's logs (the worker's, the mail server's) to ``keep``, if given."""
    if keep is None:
        return
    keep.mkdir(parents=True, exist_ok=True)
    for log in work.glob("*.log"):
        shutil.copyfile(log, keep / log.name)
    console.print(f"logs copied to {keep}")


def collect(opts: tuple[Plan, Limits], broker: Broker, work: Path) -> Outcome:
    plan, limits = opts
    check_disk(plan, work)
    bench = AgentBench.fresh(broker, work, "backlog", plan.partitions)
    tag = bench.tag
    bench.extra = worker_settings(plan)
    tick = measure_tick(plan)
    console.print(
        f"a tick over {tick.held:,} due threads: {tick.ms:.1f} ms with {plan.body_kb} KB bodies, "
        f"{tick.baseline_ms:.1f} ms with 1 KB"
    )
    try:
        produce_s, backlog_mb = produce_backlog(plan, broker, bench.deliveries, tag)
        bench.start_mail()
        started = bench.start_worker()
        worker = bench.worker
        assert worker is not None
        cpu = CpuWindow(bench.cpu_pids("worker", worker.pid))
        cpu.begin()
        console.print(f"worker started: {', '.join(f'{k}={v}' for k, v in bench.extra.items())}")
        watch = watch_drain(bench, plan, started, limits)
        cpu.end()
        time.sleep(SETTLE_S)
        metrics = final_counters(bench)
        hwm = group_rss_mb(worker.pid)[1]
        stats = bench.mail_stats()
        counts = bench.control("counts", timeout_s=60)
    except BaseException:
        if bench.worker is not None:
            console.print(f"[dim]worker log tail:\n{bench.worker.log_tail(20)}[/]")
        raise
    finally:
        bench.stop_all()
        copy_logs(bench.work, limits.keep)
    expected = {message_id(tag, n) for n in range(plan.threads)}
    log_text = worker.log()
    return Outcome(
        plan,
        started,
        float(stats["first"]),
        float(stats["last"]),
        hwm,
        watch.peak_rss_mb,
        PerMessage.mailed(expected, counts),
        rebalances(log_text),
        histogram_buckets(metrics, FENCE_TO_SEND),
        counters(metrics, *KEPT),
        watch.samples,
        cpu.percent,
        produce_s,
        backlog_mb,
        watch.drained,
        watch.samples[-1].t_s,
        overlaps(log_text),
        tick,
        PerMessage.mailed(expected, counts, sends=True),
    )


def options(
    stall_s: float, timeout_s: float | None, keep_logs: Path | None, **values: Any
) -> tuple[Plan, Limits]:
    """The plan (the worker's defaults for what was not given) and the drain's limits."""
    from onceonly.foundation.settings import Settings

    defaults = Settings.from_env()
    values["concurrency"] = values["concurrency"] or defaults.writer_concurrency
    values["max_pending"] = values["max_pending"] or defaults.max_pending
    return Plan(**values, partitions=defaults.partitions), Limits(stall_s, timeout_s, keep_logs)


OPTIONS = (
    Opt("--threads", Int(1, 10_000_000), 50_000),
    Opt("--body-kb", Int(1, 1024), 50),
    Opt("--writer-s", Float(0.001, 600), 1.0),
    Opt("--window-ms", Int(0, 60_000), 2000),
    Opt("--concurrency", Int(1, 4096), None, "Writer calls in flight [the worker's default, 64]."),
    Opt(
        "--max-pending",
        Int(1, 1_000_000),
        None,
        "ONCEONLY_MAX_PENDING [the worker's default, 4096].",
    ),
    Opt(
        "--stall-s",
        Float(10, 7200),
        600.0,
        "Fail when neither the replies nor the consumer lag move for this long.",
    ),
    Opt(
        "--timeout-s",
        Float(10, 86_400),
        None,
        "Stop waiting after this long and report what drained [no limit].",
    ),
    Opt(
        "--keep-logs",
        click.Path(file_okay=False, path_type=Path),
        None,
        "Copy the worker's and the mail server's logs to this directory.",
    ),
)
BACKLOG = Scenario(
    "backlog",
    "onceonly backlog benchmark",
    OPTIONS,
    options,
    collect,
    sections=lambda _opts, outcome: [section(outcome)],
    about=whole_run,
)
main = command(
    BACKLOG, "Drain a backlog of large bodies with a slow writer: time, RSS, rebalances, once."
)


if __name__ == "__main__":
    main()

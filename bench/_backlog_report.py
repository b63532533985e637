"""The backlog benchmark's part of the report: its table, its RSS over time, how it ran."""

from __future__ import annotations

import math

from bench._backlog_figures import RSS_TARGET_MB, Outcome, Plan
from bench._proc_stack import bucket_of
from bench._report import (
    CONTENDED_PERCENT,
    Comparison,
    Figure,
    Section,
    fmt,
    fmt_cpu,
    met,
    thin,
    verdict_table,
)

HEADERS = ("figure", "value", "target or baseline", "")
#: Rows of the RSS-over-time table, at most.
SAMPLE_ROWS = 12


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.3g} ms"


def _bound(seconds: float) -> str:
    return "+Inf" if math.isinf(seconds) else _ms(seconds)


def drain_row(o: Outcome) -> tuple[str, str, str, str]:
    """The drain time beside its floor; what had drained, when the run stopped waiting."""
    p = o.plan
    floor = f"floor {p.floor_s:,.1f} s ({p.threads:,} x {p.writer_s:g} s / {p.concurrency})"
    name = "time from the worker's start to the last reply"
    if not o.drained:
        done = f"not drained: {o.emails.total:,} of {p.threads:,} replies at {o.stopped_s:,.0f} s"
        return name, done, floor, "NOT met (timed out)"
    return name, f"{o.drain_s:,.1f} s", floor, f"{o.drain_s / p.floor_s:.2f} x the floor"


def fmt_overlaps(found: dict[str, tuple[int, float]]) -> str:
    return ", ".join(f"{k}: {n} (longest {s:.1f} s)" for k, (n, s) in found.items()) or "none"


def tick_rows(o: Outcome) -> list[tuple[str, str, str, str]]:
    """A tick's cost with the run's bodies beside its 1 KB baseline, when it was measured."""
    t = o.tick
    if t is None:
        return []
    return [
        (
            f"a tick's due_keys over {t.held:,} due threads (one partition's share)",
            f"{t.ms:,.1f} ms with {t.body_kb} KB bodies",
            f"{t.baseline_ms:,.1f} ms with 1 KB bodies",
            f"{t.ratio:.1f} x the 1 KB baseline",
        )
    ]


def rows(o: Outcome) -> list[tuple[str, str, str, str]]:
    """(figure, value, target or baseline, verdict) rows."""
    p, emails = o.plan, o.emails
    p50, p99 = o.fence_q(0.5), o.fence_q(0.99)
    pending = max((s.pending for s in o.samples if not math.isnan(s.pending)), default=math.nan)
    return [
        drain_row(o),
        ("… to the first reply", f"{o.first_reply_s:,.1f} s", "", ""),
        (
            "replies/s, first reply to last",
            f"{o.reply_rate:,.1f}",
            f"{p.floor_rate:,.1f} ({p.concurrency} / {p.writer_s:g} s)",
            f"{o.reply_rate / p.floor_rate:.2f} x the floor's",
        ),
        (
            "worker's peak RSS (VmHWM)",
            f"{o.peak_mb:,.0f} MiB",
            f"< {RSS_TARGET_MB:,.0f} MiB",
            met(o.peak_mb < RSS_TARGET_MB),
        ),
        (
            "rebalances after the first assignment",
            o.rebalances.describe(),
            "none",
            met(o.rebalances.none),
        ),
        (
            "threads answered exactly once",
            f"{emails.once:,} of {len(emails.counts):,}",
            "all",
            met(emails.passed),
        ),
        (
            "… never answered / answered twice or more",
            f"{emails.none} / {emails.more_than_once}",
            "0 / 0",
            "",
        ),
        (
            "fence-to-send p50 / p99",
            f"{_ms(p50)} / {_ms(p99)}",
            "",
            f"buckets ≤ {_bound(bucket_of(p50, o.fence))} / ≤ {_bound(bucket_of(p99, o.fence))}",
        ),
        ("sends fenced (onceonly_fenced_total)", f"{o.fenced:g}", "", ""),
        ("timers overlapping (mode's warnings)", fmt_overlaps(o.overlaps), "", ""),
        (
            "most work pending, sampled (records and releases)",
            fmt(pending, ",.0f"),
            f"bound: ONCEONLY_MAX_PENDING = {p.max_pending:,}",
            "",
        ),
        *tick_rows(o),
        (
            "writer calls per thread",
            fmt(o.writer_calls / p.threads, ".3f"),
            "1 (a fenced reply's call is made again)",
            "",
        ),
    ]


def sample_table(o: Outcome) -> list[str]:
    headers = ("s after start", "replies", "worker RSS, MiB", "work pending", "consumer lag")
    rows = [
        (
            f"{s.t_s:,.0f}",
            f"{s.replies:,}",
            f"{s.rss_mb:,.0f}",
            fmt(s.pending, ",.0f"),
            fmt(s.lag, ",.0f"),
        )
        for s in thin(o.samples, SAMPLE_ROWS)
    ]
    return verdict_table(headers, rows, verdict=False)


def settings_line(p: Plan) -> str:
    return (
        f"ONCEONLY_REPLY_WRITER=bench._model:fixed (async, sleeps {p.writer_s:g} s), "
        f"ONCEONLY_REORDER_WINDOW_MS={p.window_ms}, ONCEONLY_WRITER_CONCURRENCY={p.concurrency}, "
        f"ONCEONLY_MAX_PENDING={p.max_pending}, {p.partitions} partitions, worker log level INFO"
    )


def how(o: Outcome) -> list[str]:
    p = o.plan
    counters = ", ".join(f"{k} = {v:g}" for k, v in sorted(o.counters.items()))
    out = [
        f"the backlog: {p.threads:,} AgentMail `message.received` events, each a thread of its "
        f"own with a {p.body_kb} KB text body, as ingest's envelopes ({o.backlog_mb:,.0f} MB), "
        f"produced to the deliveries topic in {o.produce_s:,.0f} s before the worker started",
        "one `onceonly worker` process: " + settings_line(p),
        "replies go to the instant mail server (`bench._instant_mail`, the worker's real "
        "AgentMail sender); each thread's message must get one email (one distinct "
        f"idempotency key): {o.emails.total:,} emails from {o.sends.total:,} requests",
        "drain time: from just before the worker was spawned (imports, group join and "
        "table recovery included) to the mail server's last send; the floor is "
        "threads x writer-s / concurrency, every writer slot busy from the first second",
        "peak RSS: the worker's VmHWM at the end (it and its children, /proc/<pid>/status), "
        f"the largest VmRSS sampled each second was {o.peak_rss_mb:,.0f} MiB",
        "rebalances: the worker's log, its `joining the consumer group` and `joined the "
        "consumer group` lines (one each at start-up) and any line of aiokafka's or "
        "faust's about a rebalance (heartbeat or commit failures, rejoins, a coordinator "
        "lost); the fence's refusals are counted apart, by onceonly_fenced_total",
        "fence-to-send: `onceonly_fence_to_send_seconds` at the end, p50 and p99 "
        "interpolated within its buckets as Prometheus' histogram_quantile does",
        "a tick's cost: `Holds.due_keys` timed in the benchmark's process over one "
        "partition's share of the backlog (at most 2,000 threads), every thread due, held in a "
        "dict with the run's bodies and with 1 KB bodies (the baseline); best of 3",
        "work pending: `onceonly_pending_records`, the records taken and not finished and the "
        "releases of held buffers queued or running, read every 5 s with the consumer lag",
        f"CPU from the worker's start to the last reply, % of one core: {fmt_cpu(o.cpu)}",
        f"worker counters at the end: {counters or 'n/a'}",
    ]
    if o.cpu.get("other", 0.0) >= CONTENDED_PERCENT:
        out.append(
            f"other work on this machine took {o.cpu['other']:.0f}% of a core meanwhile "
            "(`other`): the drain may be slower than on an idle machine"
        )
    for line in o.rebalances.lines[:5]:
        out.append(f"rebalance line: `{line[:200]}`")
    return out


def section(o: Outcome) -> Section:
    """The report's section, with the drain rate beside the writer's floor."""
    p = o.plan
    comparison = Comparison(
        "replies/s",
        Figure("onceonly", "onceonly worker, start to last reply", o.drain_rate),
        (Figure("floor", f"floor: {p.concurrency} writer calls / {p.writer_s:g} s", p.floor_rate),),
    )
    body = [
        *verdict_table(HEADERS, rows(o)),
        "",
        f"Targets: {met(o.targets_met)} (RSS under {RSS_TARGET_MB:,.0f} MiB, no rebalance, "
        "every thread answered once).",
        "",
        "The worker's RSS during the drain:",
        "",
        *sample_table(o),
    ]
    heading = f"Backlog of {p.threads:,} threads, window {p.window_ms:,} ms"
    return Section(heading, comparison, body, how(o))

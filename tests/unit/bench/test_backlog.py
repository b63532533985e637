"""bench.backlog's figures: rebalances from the log, the fence histogram's quantiles, the
emails per thread, the verdicts and the report's rows."""

from __future__ import annotations

import math

import pytest

from bench._backlog_figures import (
    RSS_TARGET_MB,
    Outcome,
    Plan,
    Rebalances,
    Sample,
    TickCost,
    overlaps,
    rebalances,
)
from bench._backlog_records import backlog_records, body_text
from bench._backlog_report import fmt_overlaps, rows, section
from bench._load import message_id
from bench._once import PerMessage
from bench._proc_stack import bucket_of, histogram_buckets, histogram_quantile
from bench._report import thin

START = (
    "2026-12-02T10:00:00.000Z [info     ] worker starting app=x\n"
    "2026-12-02T10:00:01.000Z [info     ] joining the consumer group group=x revoked=0\n"
    "2026-12-02T10:00:02.000Z [info     ] joined the consumer group group=x partitions={}\n"
    "2026-12-02T10:00:03.000Z [info     ] reply sent key=k\n"
)


def test_one_join_at_start_up_is_no_rebalance() -> None:
    found = rebalances(START)

    assert found == Rebalances(1, 1, ())
    assert found.none


def test_a_coordinator_lookup_is_no_rebalance_and_start_up_lines_do_not_count() -> None:
    before = "2026-12-02T10:00:01.500Z [warning  ] Heartbeat failed for group x because it is "
    lost = "2026-12-02T10:05:00.000Z [warning  ] Marking the coordinator dead (node 1)for group x."
    lines = START.splitlines()
    text = "\n".join([*lines[:2], before + "rebalancing", *lines[2:], lost])

    found = rebalances(text)

    assert found == Rebalances(1, 1, (), coordinator_lost=1)
    assert found.none


def test_a_second_join_is_a_rebalance() -> None:
    text = START + (
        "2026-12-02T10:05:00.000Z [info     ] joining the consumer group group=x revoked=8\n"
        "2026-12-02T10:05:01.000Z [info     ] joined the consumer group group=x partitions={}\n"
    )

    found = rebalances(text)

    assert (found.joins, found.joined, found.none) == (2, 2, False)


@pytest.mark.parametrize(
    "line",
    [
        "2026-12-02T10:05:00.000Z [warning  ] Heartbeat failed for group x because it is "
        "rebalancing",
        "2026-12-02T10:05:00.000Z [warning  ] Heartbeat failed: local member_id was not "
        "recognized; resetting and re-joining group",
        "2026-12-02T10:05:00.000Z [error    ] Heartbeat session expired - marking coordinator dead",
    ],
)
def test_aiokafkas_lines_are_rebalances(line: str) -> None:
    found = rebalances(START + line + "\n")

    assert found.lines == (line,)
    assert not found.none


def test_a_fence_refusal_alone_is_no_rebalance() -> None:
    line = "2026-12-02T10:05:00.000Z [warning  ] partition no longer ours; standing down"

    assert rebalances(START + line + "\n").none


METRICS = {
    'onceonly_fence_to_send_seconds_bucket{le="0.0001"}': 40.0,
    'onceonly_fence_to_send_seconds_bucket{le="0.0005"}': 90.0,
    'onceonly_fence_to_send_seconds_bucket{le="0.001"}': 99.0,
    'onceonly_fence_to_send_seconds_bucket{le="0.005"}': 100.0,
    'onceonly_fence_to_send_seconds_bucket{le="+Inf"}': 100.0,
    "onceonly_fence_to_send_seconds_count": 100.0,
    'onceonly_writer_seconds_bucket{le="1.0"}': 7.0,
}


def test_the_buckets_of_one_histogram_in_order_of_their_bounds() -> None:
    buckets = histogram_buckets(METRICS, "onceonly_fence_to_send_seconds")

    assert buckets == [
        (0.0001, 40.0),
        (0.0005, 90.0),
        (0.001, 99.0),
        (0.005, 100.0),
        (math.inf, 100.0),
    ]


def test_quantiles_are_interpolated_within_their_bucket_as_prometheus_does() -> None:
    buckets = histogram_buckets(METRICS, "onceonly_fence_to_send_seconds")

    assert histogram_quantile(0.5, buckets) == pytest.approx(0.0001 + 0.0004 * 10 / 50)
    assert histogram_quantile(0.2, buckets) == pytest.approx(0.00005)  # from 0 in the first
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.001)
    assert bucket_of(histogram_quantile(0.5, buckets), buckets) == 0.0005


def test_a_quantile_in_the_inf_bucket_is_the_largest_finite_bound() -> None:
    assert histogram_quantile(0.99, [(0.1, 1.0), (1.0, 2.0), (math.inf, 10.0)]) == 1.0


def test_no_observations_no_quantile() -> None:
    assert math.isnan(histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(0.5, []))


def test_emails_per_thread_missing_and_twice_and_stray() -> None:
    counts = {"<a>": [1, 1], "<b>": [2, 3], "<c>": [1, 2], "<z>": [1, 1]}
    ids = ["<a>", "<b>", "<c>", "<d>"]

    emails, sends = PerMessage.mailed(ids, counts), PerMessage.mailed(ids, counts, sends=True)

    assert (len(emails.counts), emails.once, emails.none, emails.more_than_once) == (4, 2, 1, 1)
    assert (emails.total, sends.total) == (4, 6)
    assert not emails.passed
    assert PerMessage.mailed(["<a>"], {"<a>": [1, 2]}).passed


def outcome(hwm_mb: float = 600.0, log: str = START, emails: int = 1) -> Outcome:
    plan = Plan(100, 50, 1.0, 2000, 64, 4096, 8)
    ids = [message_id("t", n) for n in range(100)]
    mailed = PerMessage.mailed(ids, {m: [emails, emails] for m in ids})
    buckets = histogram_buckets(METRICS, "onceonly_fence_to_send_seconds")
    return Outcome(
        plan,
        started=1000.0,
        first=1010.0,
        last=1013.0,
        hwm_mb=hwm_mb,
        peak_rss_mb=500.0,
        emails=mailed,
        rebalances=rebalances(log),
        fence=buckets,
        counters={"onceonly_fenced_total": 0.0},
        samples=[Sample(float(t), t * 10, 400.0 + t) for t in range(30)],
        cpu={"worker": 50.0, "other": 10.0},
    )


def test_the_floor_is_threads_times_the_writer_over_the_concurrency() -> None:
    o = outcome()

    assert o.plan.floor_s == pytest.approx(100 / 64)
    assert o.drain_s == 13.0
    assert o.reply_rate == pytest.approx(99 / 3)
    assert o.targets_met


@pytest.mark.parametrize(
    "bad",
    [
        {"hwm_mb": RSS_TARGET_MB},
        {"log": START + "2026-12-02T10:05:00.000Z [info     ] joined the consumer group\n"},
        {"emails": 2},
    ],
)
def test_each_target_can_fail_the_run(bad: dict[str, object]) -> None:
    o = outcome(**bad)  # type: ignore[arg-type]

    assert not o.targets_met
    assert any(row[3] == "NOT met" for row in rows(o))


def test_the_rows_state_the_targets_and_the_floor() -> None:
    table = {row[0]: row for row in rows(outcome())}

    drain = table["time from the worker's start to the last reply"]
    assert drain[1:] == ("13.0 s", "floor 1.6 s (100 x 1 s / 64)", "8.32 x the floor")
    assert table["worker's peak RSS (VmHWM)"][3] == "met"
    assert table["threads answered exactly once"][1:] == ("100 of 100", "all", "met")
    assert table["fence-to-send p50 / p99"][1] == "0.18 ms / 1 ms"


def test_a_run_that_timed_out_says_what_drained_and_fails() -> None:
    o = outcome()
    o.drained, o.stopped_s = False, 600.0

    drain = rows(o)[0]

    assert drain[1] == "not drained: 100 of 100 replies at 600 s"
    assert drain[3] == "NOT met (timed out)"
    assert not o.targets_met


def test_timer_overlaps_count_each_timer_and_its_longest_run() -> None:
    log = (
        "x [warning  ] Timer commit is overlapping (interval=2.8 runtime=12.5) [mode.timers]\n"
        "x [warning  ] Timer commit is overlapping (interval=2.8 runtime=52.25) [mode.timers]\n"
        "x [warning  ] Timer onceonly.tick is overlapping (interval=0.5 runtime=1.1)\n"
    )

    found = overlaps(log)

    assert found == {"commit": (2, 52.25), "onceonly.tick": (1, 1.1)}
    assert fmt_overlaps(found) == "commit: 2 (longest 52.2 s), onceonly.tick: 1 (longest 1.1 s)"
    assert fmt_overlaps({}) == "none"


def test_the_section_compares_the_drain_rate_with_the_floor() -> None:
    found = section(outcome())

    assert found.comparison is not None
    assert found.comparison.subject.rate == pytest.approx(100 / 13)
    assert found.comparison.baselines[0].rate == 64.0
    assert "Targets: met" in "\n".join(found.body)


def test_samples_keep_the_first_and_the_last() -> None:
    found = [Sample(float(t), t, 1.0) for t in range(100)]

    kept = thin(found, 12)

    assert len(kept) == 12
    assert (kept[0].t_s, kept[-1].t_s) == (0.0, 99.0)
    assert thin(found[:5], 12) == found[:5]


def test_a_backlog_record_is_one_thread_with_a_body_of_the_size_asked() -> None:
    from onceonly.schemas.envelope import Envelope

    (key, value, _), second = list(backlog_records(2, "t", 4))
    envelope = Envelope.decode(value)

    assert key == b"agentmail:thr_t_000000"
    assert envelope.message_id == message_id("t", 0)
    assert not envelope.truncated
    assert envelope.payload()["message"]["text"] == body_text(0, 4096)
    assert len(body_text(7, 4096)) == 4096
    assert second[0] == b"agentmail:thr_t_000001"


def test_a_ticks_cost_is_shown_beside_its_1_kb_baseline() -> None:
    o = outcome()
    o.tick = TickCost(held=1250, body_kb=50, ms=150.0, baseline_ms=10.0)

    (row,) = [r for r in rows(o) if r[0].startswith("a tick's due_keys")]

    assert row == (
        "a tick's due_keys over 1,250 due threads (one partition's share)",
        "150.0 ms with 50 KB bodies",
        "10.0 ms with 1 KB bodies",
        "15.0 x the 1 KB baseline",
    )
    assert not any(r[0].startswith("a tick's") for r in rows(outcome()))


def test_a_tick_is_timed_over_due_threads_of_the_plans_share() -> None:
    from bench._backlog_records import measure, tick_ms

    assert tick_ms(5, 1) >= 0
    cost = measure(Plan(16, 1, 1.0, 0, 64, 4096, 8))
    assert (cost.held, cost.body_kb) == (2, 1)
    assert cost.ratio > 0

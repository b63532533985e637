"""The DBOS comparison's figures: model calls and emails per message, and the report table."""

from __future__ import annotations

import math

from bench._dbos_figures import SystemRun, headers, in_flight, parse_calls, rows, starts, verdicts
from bench._once import PerMessage
from bench._report import verdict_table

CALLS = (
    "100 start <a>\n"
    "100 start <b>\n"
    "100 done <a>\n"
    "100 start <c>\n"  # <b> and <c> were in flight when 100 was killed
    "200 start <b>\n"
    "200 start <c>\n"
    "200 done <b>\n"
    "200 done <c>\n"
    "200 start <d"  # cut short by a kill: no newline
)


def test_a_line_cut_short_by_a_kill_is_left_out() -> None:
    calls = parse_calls(CALLS)
    assert len(calls) == 8
    assert all(c.message_id != "<d" for c in calls)


def test_calls_started_are_counted_per_message() -> None:
    assert starts(parse_calls(CALLS)) == {"<a>": 1, "<b>": 2, "<c>": 2}


def test_calls_in_flight_are_those_the_killed_process_never_finished() -> None:
    calls = parse_calls(CALLS)
    assert in_flight(calls, 100) == 2
    assert in_flight(calls, 200) == 0


def test_per_message_counts_every_message_asked_for_even_unseen_ones() -> None:
    per = PerMessage.of(["<a>", "<b>", "<c>", "<e>"], {"<a>": 1, "<b>": 2, "<c>": 1, "<z>": 5})
    assert per.counts == {"<a>": 1, "<b>": 2, "<c>": 1, "<e>": 0}
    assert per.mean == 1.0
    assert (per.most, per.more_than_once, per.none) == (2, 1, 1)
    assert per.describe() == "1.000 (max 2; 1 more than once, 1 never)"


def test_the_mail_servers_pairs_are_emails_then_requests() -> None:
    counts = {"<a>": [1, 3], "<b>": [2, 2]}
    assert PerMessage.mailed(["<a>", "<b>"], counts).counts == {"<a>": 1, "<b>": 2}
    assert PerMessage.mailed(["<a>", "<b>"], counts, sends=True).counts == {"<a>": 3, "<b>": 2}


def _run(label: str, latency_s: float, gap_s: float, calls: dict[str, int]) -> SystemRun:
    ids = [f"<{n}>" for n in range(11)]
    run = SystemRun(label)
    run.produced = {m: 100.0 + i * gap_s for i, m in enumerate(ids)}
    run.received = {m: t + latency_s for m, t in run.produced.items()}
    run.cpu_s = {"worker": 0.11, "broker": 0.022}
    run.memory_mb = {"worker": 100.0}
    run.kill_messages = ids
    run.emails = PerMessage.of(ids, dict.fromkeys(ids, 1))
    run.calls = PerMessage.of(ids, calls)
    return run


def test_replies_per_second_run_from_the_first_reply_to_the_last() -> None:
    run = _run("a", 1.0, 0.5, {})
    assert run.replies == 11
    assert math.isclose(run.replies_per_s, 2.0)  # 10 intervals over 5 s


def test_latency_is_from_the_record_to_its_email_and_unanswered_ones_are_left_out() -> None:
    run = _run("a", 1.5, 0.5, {})
    del run.received["<3>"]
    assert run.latencies == [1.5] * 10
    assert run.p(0.99) == 1.5


def test_cpu_per_reply_is_per_process_and_in_all() -> None:
    run = _run("a", 1.0, 0.5, {})
    assert math.isclose(run.cpu_ms_per_reply("worker"), 10.0)
    assert math.isclose(run.cpu_ms_per_reply(), 12.0)


def test_onceonly_meets_its_targets_only_when_better_on_each() -> None:
    a = _run("onceonly", 1.0, 0.5, {"<0>": 1})
    b = _run("dbos", 2.0, 0.5, {"<0>": 2})
    assert verdicts(a, b) == {"replies/s": "met", "p99": "met", "emails": "met", "calls": "met"}
    a.emails = PerMessage.of(["<0>"], {"<0>": 2})
    assert verdicts(a, b)["emails"] == "NOT met"
    assert verdicts(b, a)["p99"] == "NOT met"


def test_as_many_model_calls_as_dbos_does_not_meet_fewer() -> None:
    a = _run("onceonly", 1.0, 0.5, {"<0>": 2})
    b = _run("dbos", 1.0, 0.5, {"<0>": 2})
    assert verdicts(a, b)["calls"] == "NOT met"


def test_the_table_has_both_systems_side_by_side() -> None:
    a = _run("onceonly worker", 1.0, 0.5, {})
    b = _run("DBOS app", 2.0, 0.5, {})
    table = verdict_table(headers(a, b), rows(a, b))
    assert table[0] == "| figure | onceonly worker | DBOS app | target for onceonly |"
    by_figure = {r[0]: r[1:] for r in rows(a, b)}
    assert by_figure["p99 record → email, s"] == ("1.00", "2.00", "<= DBOS's: met")
    assert by_figure["CPU per reply, ms (by process)"][0] == "12.00 (worker 10.00, broker 2.00)"
    assert by_figure["memory, MB PSS (by process)"][0] == "100 (worker 100)"
    assert len(table) == 2 + len(rows(a, b))


def test_repeats_are_the_calls_beyond_one_per_message_not_cut_short_by_the_kill() -> None:
    run = _run("a", 1.0, 0.5, {})
    counts = {m: 1 for m in run.kill_messages} | {"<0>": 2, "<1>": 3}
    run.calls = PerMessage.of(run.kill_messages, counts)
    run.in_flight_at_kill = 2
    assert run.repeated_after_return == 1
    run.in_flight_at_kill = 3
    assert run.repeated_after_return == 0

"""The ingest benchmark's report: CPU per delivery of every process, the targets, c2 and
the projection to more cores."""

from __future__ import annotations

import math

import pytest

from bench._ingest_report import HEADERS, latency_lines, rounds_lines, rows, scaling_lines
from bench._ingest_results import (
    OpenLoop,
    Results,
    Run,
    per_delivery_us,
    rotated,
    summary_lines,
    verdict,
)
from bench._load import Sample
from bench._options import Values


def _run(key: str, rate: float, cpu: dict[str, float], parts: tuple[str, ...] = ("server",)) -> Run:
    sample = Sample(duration_s=1.0)
    sample.statuses["204"] = int(rate)
    return Run(key, f"({key})", sample, cpu, parts)


def _runs(c_server: float = 30.0, d_rate: float = 1_000) -> list[Run]:
    # b: 10,000/s with its server at 90 % of a core: 90 µs a delivery.
    # c: 2,000/s with ingest at c_server % (30 %: 150 µs) and the broker at 20 % (100 µs).
    return [
        _run("b", 10_000, {"server": 90.0, "broker": 2.0, "load": 45.0}),
        _run("c", 2_000, {"server": c_server, "broker": 20.0, "load": 10.0}, ("server", "broker")),
        _run("d", d_rate, {"server": 40.0, "postgres": 30.0}, ("server", "postgres")),
    ]


def _row(runs: list[Run], key: str) -> dict[str, str]:
    row = next(r for r in rows(runs) if r[0] == f"({key})")
    return dict(zip(HEADERS, row, strict=True))


def test_cpu_per_delivery_is_the_cpu_share_over_the_rate() -> None:
    assert per_delivery_us(75.0, 2_500) == pytest.approx(300.0)
    assert math.isnan(per_delivery_us(75.0, 0.0))
    assert math.isnan(per_delivery_us(math.nan, 2_500))


def test_each_row_gives_every_process_s_cpu_per_delivery() -> None:
    c = _row(_runs(), "c")

    assert c["server µs"] == "150"
    assert c["broker µs"] == "100"
    assert c["load µs"] == "50"
    assert c["postgres µs"] == ""  # not measured during (c)
    assert _row(_runs(), "d")["postgres µs"] == "300"


def test_the_total_counts_the_server_s_own_processes_and_not_the_load_generator() -> None:
    runs = _runs()

    assert _row(runs, "c")["total µs"] == "250"  # ingest + broker
    assert _row(runs, "d")["total µs"] == "700"  # server + PostgreSQL
    assert _row(runs, "b")["total µs"] == "90"  # the idle broker is not b's


def test_the_cpu_target_is_met_at_one_and_a_half_times_b_s_cost() -> None:
    at_target = verdict(_runs(c_server=27.0))  # 135 µs = 1.5 x 90 µs
    above = verdict(_runs(c_server=27.2))  # 136 µs

    assert at_target.c_us == pytest.approx(135.0)
    assert at_target.cpu_met
    assert not above.cpu_met
    assert "target ≤ 1.5 x: NOT met" in summary_lines(above)[0]


def test_the_throughput_target_is_twice_d_s_deliveries() -> None:
    assert verdict(_runs(d_rate=1_000)).throughput_met  # c 2,000/s
    assert not verdict(_runs(d_rate=1_001)).throughput_met
    assert "c/d = 2 in deliveries/s (target ≥ 2: met)" in summary_lines(verdict(_runs()))


def test_no_cpu_of_b_means_the_cpu_target_is_not_met() -> None:
    runs = _runs()
    runs[0].cpu.pop("server")

    assert not verdict(runs).cpu_met


def test_c2_stands_beside_c() -> None:
    c2 = _run("c2", 3_000, {"server": 150.0, "broker": 30.0}, ("server", "broker"))

    line = scaling_lines([*_runs(), c2])[0]

    assert line.startswith("c2 (ONCEONLY_INGEST_PROCESSES=2) = 3,000 deliveries/s, 1.5 x c's 2,000")
    assert "500 µs (the parent and both children) against c's 150 µs" in line


def test_more_cores_are_projected_from_c_s_cpu_per_delivery() -> None:
    line = scaling_lines(_runs())[-1]  # ingest 150 µs, broker 100 µs

    assert "ingest's 150 µs give 6,667 deliveries/s per core" in line
    assert "ingest + broker take 250 µs per delivery: 4,000/s per core" in line
    assert "53,333/s on 8 cores, 106,667/s on 16 cores" in line
    assert "brokers' own machines" in line


def test_no_projection_without_c_s_cpu() -> None:
    runs = _runs()
    runs[1].cpu.pop("server")

    assert scaling_lines(runs) == []


def _open_loop(
    fraction: float,
    rate: float,
    latency_s: float,
    steal: float = math.nan,
    waited: float = math.nan,
) -> OpenLoop:
    sample = Sample(
        duration_s=1.0,
        latencies=[latency_s] * 100,
        send_lag=[0.002] * 100,
        dispatch_lag=[0.001] * 100,
    )
    sample.statuses["204"] = 100
    return OpenLoop(fraction, rate, sample, {"server": 50.0}, steal, waited)


def test_the_latency_target_is_judged_at_half_of_c_s_peak_only() -> None:
    runs = _runs()
    c = runs[1]
    c.open_loops = [_open_loop(0.5, 1_000, 0.030), _open_loop(0.25, 500, 0.005)]

    v = verdict(runs)

    assert v.half_rate == 1_000
    assert v.half_p99_ms == pytest.approx(30.0)
    assert not v.latency_met


def test_each_open_loop_has_a_row_named_after_its_fraction() -> None:
    runs = _runs()
    runs[1].open_loops = [_open_loop(0.25, 500, 0.005), _open_loop(0.5, 1_000, 0.010)]

    names = [row[0] for row in rows(runs)]

    assert "(c) a quarter of peak, open loop" in names
    assert "(c) half of peak, open loop" in names


def test_the_other_open_loops_are_reported_without_a_target() -> None:
    runs = _runs()
    runs[1].open_loops = [_open_loop(0.25, 500, 0.005), _open_loop(0.5, 1_000, 0.010)]

    lines = latency_lines(runs)

    assert len(lines) == 1
    assert lines[0] == (
        "at a quarter of c's peak (500/s): p50 5.00 ms, p99 5.00 ms (no target); the "
        "generator queued them up to 1.00 ms late and sent them up to 2.00 ms late (p99)"
    )


def test_an_open_loop_s_failures_count_among_the_run_s_failures() -> None:
    runs = _runs()
    failing = _open_loop(0.5, 1_000, 0.010)
    failing.sample.statuses["503"] = 3
    runs[1].open_loops = [failing]

    assert verdict(runs).failed == 3


def test_of_several_runs_at_half_the_target_is_judged_on_the_median_one() -> None:
    runs = _runs()
    runs[1].open_loops = [_open_loop(0.5, 1_000, t) for t in (0.015, 0.050, 0.012)]

    v = verdict(runs)

    assert v.half_p99_ms == pytest.approx(15.0)
    assert v.latency_met
    assert v.half_p99s == pytest.approx((15.0, 50.0, 12.0))  # every run, in order


def test_of_an_even_number_of_runs_the_slower_middle_one_is_judged() -> None:
    runs = _runs()
    runs[1].open_loops = [_open_loop(0.5, 1_000, 0.010), _open_loop(0.5, 1_000, 0.030)]

    assert verdict(runs).half_p99_ms == pytest.approx(30.0)


def test_the_target_line_names_every_run_and_what_the_machine_took_from_each() -> None:
    runs = _runs()
    runs[1].open_loops = [
        _open_loop(0.5, 1_000, 0.015, steal=0.5, waited=4.0),
        _open_loop(0.5, 1_000, 0.050, steal=9.0, waited=15.5),
        _open_loop(0.5, 1_000, 0.012, steal=0.0, waited=3.2),
    ]

    line = summary_lines(verdict(runs))[2]

    assert "= 15.00 ms, the median of 3 runs (15.00, 50.00, 12.00 ms) (target < 20 ms: met)" in (
        line
    )
    assert "the host took 0.5, 9.0, 0.0% of a core (steal)" in line
    assert "waited for a CPU 4.0, 15.5, 3.2% of the time run by run" in line


def test_repeated_open_loops_have_numbered_rows() -> None:
    runs = _runs()
    runs[1].open_loops = [_open_loop(0.25, 500, 0.005)] + [
        _open_loop(0.5, 1_000, 0.010) for _ in range(3)
    ]

    names = [row[0] for row in rows(runs)]

    assert "(c) a quarter of peak, open loop" in names
    assert [n for n in names if "half" in n] == [
        f"(c) half of peak, open loop {i}/3" for i in (1, 2, 3)
    ]


def _rounds(c_rates: tuple[float, ...]) -> Results:
    results = Results(Values(), 8, [])
    for i, c_rate in enumerate(c_rates):
        results.rounds.append(
            [
                _run("b", 10_000 + i, {"server": 90.0}),
                _run("c", c_rate, {"server": 30.0}),
                _run("d", 1_000, {"server": 40.0}),
            ]
        )
    return results


def test_each_server_s_figures_are_its_median_round_s() -> None:
    results = _rounds((2_000, 5_000, 1_500))

    results.choose_medians()

    assert [run.key for run in results.runs] == ["b", "c", "d"]
    assert results.runs[1].peak.rate == 2_000
    assert results.runs[0].peak.rate == 10_001  # b's own median, not c's round


def test_of_an_even_number_of_rounds_the_faster_middle_one_is_taken() -> None:
    results = _rounds((2_000, 3_000))

    results.choose_medians()

    assert results.runs[1].peak.rate == 3_000


def test_every_round_s_peaks_and_ratios_are_reported_in_order() -> None:
    lines = rounds_lines(_rounds((2_000, 3_000, 1_000)).rounds)

    assert "(c) 2,000, 3,000, 1,000" in lines[0]
    assert "c/d: 2, 3, 1" in lines[1]


def test_a_single_round_has_no_rounds_line() -> None:
    assert rounds_lines(_rounds((2_000,)).rounds) == []


def test_each_round_starts_one_server_later() -> None:
    keys = ["a", "b", "c"]

    assert [rotated(keys, n) for n in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]

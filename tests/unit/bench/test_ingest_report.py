"""The ingest benchmark's report: CPU per delivery of every process, the targets, c2 and
the projection to more cores."""

from __future__ import annotations

import math

import pytest

from bench._ingest_report import (
    HEADERS,
    latency_lines,
    rows,
    scaling_lines,
    summary_lines,
    verdict,
)
from bench._ingest_results import OpenLoop, Run, per_delivery_us
from bench._load import Sample


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


def _open_loop(fraction: float, rate: float, latency_s: float) -> OpenLoop:
    sample = Sample(
        duration_s=1.0,
        latencies=[latency_s] * 100,
        send_lag=[0.002] * 100,
        dispatch_lag=[0.001] * 100,
    )
    sample.statuses["204"] = 100
    return OpenLoop(fraction, rate, sample, {"server": 50.0})


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

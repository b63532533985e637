"""``python -m bench`` (``make bench``): the ingest and the processor benchmark in one run,
one report.

Both run against one Kafka broker (embedded, or ``ONCEONLY_KAFKA_BOOTSTRAP``): first
the ingest benchmark (:mod:`bench.ingest`, wrk as the closed-loop load: (a) bare aiohttp,
(b) + svix verification, (c) onceonly ingest, (c2) with two ingest processes, (m) with the
envelope MAC, (d) + svix + PostgreSQL INSERT ... ON CONFLICT DO NOTHING), then the
processor benchmark (:mod:`bench.processors`: a plain faust agent vs onceonly's worker,
RSS with many dedupe entries, restart-to-first-event). It writes
``bench/results/bench-<date>.md`` and ``bench/results/bench-<date>.png``: the machine,
a table per benchmark with every baseline and onceonly's figures as ratios to each, and
a chart of throughput and latency.

A smoke run, in about two minutes::

    python -m bench --duration 2 --warmup 0.5 --pool 2000 --broker-warmup 2 \\
        --events 300 --dedupe-entries 2000 --rss-budget 30
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench import ingest as ingest_mod
from bench import processors as processors_mod
from bench._options import (
    IngestOptions,
    ProcessorOptions,
    ingest_options,
    out_option,
    processor_options,
)
from bench._procs import Broker, console
from bench._report import command_line, run_on_broker, write_report


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@ingest_options
@processor_options
@out_option
def main(ingest: IngestOptions, processors: ProcessorOptions, out: Path) -> None:
    """Run the ingest and the processor benchmarks; write one report with a chart."""

    def collect(broker: Broker, work: Path) -> tuple[ingest_mod.Results, processors_mod.Results]:
        (work / "ingest").mkdir()
        (work / "processors").mkdir()
        console.rule("ingest benchmark")
        ingest_results = ingest_mod.collect(ingest, broker, work / "ingest")
        console.rule("processor benchmark")
        return ingest_results, processors_mod.collect(processors, broker, work / "processors")

    took: list[float] = []

    def whole_run(_results: object, seconds: float) -> list[tuple[str, str]]:
        took.append(seconds)
        return [("whole run", f"{seconds:.0f} s")]

    (ingest_results, processor_results), items = run_on_broker(
        "onceonly-bench-", collect, whole_run
    )
    sections = [ingest_mod.section(ingest_results), processors_mod.section(processor_results)]
    md, png = write_report(
        "bench", "onceonly benchmark", sections, items, command_line("bench"), out
    )
    console.print(f"written to {md} and {png.name} ({took[0]:.0f} s in all)")
    if ingest_mod.verdict(ingest_results.runs).failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

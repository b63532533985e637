"""``python -m bench`` (``make bench``): the ingest and the processor benchmark on one broker,
one report with a chart (``bench/results/bench-<date>.md`` and ``.png``).

A smoke run, in about two minutes::

    python -m bench --duration 2 --warmup 0.5 --pool 2000 --broker-warmup 2 \\
        --events 300 --dedupe-entries 2000 --rss-budget 30
"""

from __future__ import annotations

from pathlib import Path

from bench import ingest as ingest_mod
from bench import processors as processors_mod
from bench._ingest_report import section as ingest_section
from bench._ingest_results import Results as IngestResults
from bench._ingest_results import verdict
from bench._options import INGEST_OPTIONS, PROCESSOR_OPTIONS, Values, with_partitions
from bench._proc_report import Results as ProcessorResults
from bench._proc_report import section as processors_section
from bench._procs import Broker, console
from bench._runner import Scenario, command, whole_run

Results = tuple[IngestResults, ProcessorResults]


def collect(opts: Values, broker: Broker, work: Path) -> Results:
    (work / "ingest").mkdir()
    (work / "processors").mkdir()
    console.rule("ingest benchmark")
    ingest_results = ingest_mod.collect(opts, broker, work / "ingest")
    console.rule("processor benchmark")
    return ingest_results, processors_mod.collect(opts, broker, work / "processors")


BENCH = Scenario(
    "bench",
    "onceonly benchmark",
    (*INGEST_OPTIONS, *PROCESSOR_OPTIONS),
    with_partitions,
    collect,
    sections=lambda _opts, r: [ingest_section(r[0]), processors_section(r[1])],
    about=whole_run,
    failed=lambda r: verdict(r[0].runs).failed > 0,
)
main = command(BENCH, "Run the ingest and the processor benchmarks; write one report with a chart.")


if __name__ == "__main__":
    main()

"""The operator index against today's whole-topic scan (``python -m bench.index_size``,
issue 45): build rate, disk per million records, ``approvals list``/``reject`` and
``trace`` as fresh processes from the index and by the scan, and the operator page. Against
an external cluster (``ONCEONLY_KAFKA_BOOTSTRAP``) with SASL, its security variables reach
the producers and the commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench._load import percentile
from bench._options import Opt, Values
from bench._proc_records import Record, agentmail_records, produce
from bench._procs import (
    ROOT,
    BenchError,
    Broker,
    console,
    create_topics,
    security_env,
    topic_settings,
)
from bench._runner import Scenario, command

if TYPE_CHECKING:
    from onceonly.foundation.settings import Settings


def ledger_records(count: int, drafts: int) -> Iterator[Record]:
    """``count`` replies, the last ``drafts`` of them awaiting approval, as the worker
    writes them (key: the reply key; value: the ledger record)."""
    from onceonly.schemas.ledger import ReplyRecord, ReplyState, Usage

    now = datetime.now(UTC)
    usage = Usage("gpt-4o-mini", 1200, 180)  # the operator page sums today's
    for n in range(count):
        state = ReplyState.AWAITING if n >= count - drafts else ReplyState.SENT
        key = f"reply-bench{n:010d}"
        record = ReplyRecord(
            key, "support@agentmail.to", f"<m{n}@example.com>", f"agentmail:thr-{n % 5000}",
            state, now, reply_text="Thanks for writing; your refund is on its way. " * 4,
            sent_message_id=None if state is ReplyState.AWAITING else f"sent-{n}", usage=usage,
        )  # fmt: skip
        yield key.encode(), record.encode(), []


@dataclass(frozen=True, slots=True)
class Listed:
    seconds: float
    peak_mb: float
    drafts: int
    source: str


def list_drafts(env: dict[str, str], work: Path) -> Listed:
    """``onceonly approvals list --json`` as a fresh process: time, its own peak RSS (by
    GNU time: a child forked from this process would count this process's pages too)."""
    return timed(env, work, "approvals", "list", "--json")


def timed(env: dict[str, str], work: Path, *args: str, exits: tuple[int, ...] = (0,)) -> Listed:
    """``onceonly ARGS`` as a fresh process: time, peak RSS, stdout lines, stderr."""
    usage = work / "cli.rss"
    started = time.monotonic()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", str(usage), sys.executable, "-m", "onceonly", *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode not in exits:
        raise RuntimeError(f"onceonly {' '.join(args)} failed: {done.stderr[-2000:]}")
    peak = int(usage.read_text().split()[-1]) / 1024
    return Listed(seconds, peak, len(done.stdout.splitlines()), done.stderr.strip())


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def traces(
    env: dict[str, str], work: Path, key: str, runs: int, what: str = "one reply key"
) -> None:
    """``onceonly trace KEY --json`` from the index, ``runs`` fresh processes: p50, p99."""
    done = [timed(env, work, "trace", key, "--json") for _ in range(runs)]
    seconds = [d.seconds for d in done]
    console.print(
        f"trace {what} (index, {runs} runs): p50 {percentile(seconds, 0.5):.2f} s, "
        f"p99 {percentile(seconds, 0.99):.2f} s, peak {max(d.peak_mb for d in done):.0f} MB"
    )


def page(settings: Settings, key: str, runs: int, name: str = "index") -> None:
    """The operator page's every section read (``OpsPage.gather``, what GET /ops does
    before it renders) and rendered, in this process, ``runs`` times: p50 and the slowest."""
    import asyncio

    from onceonly.operations import trace as trace_source
    from onceonly.operations.ops_page import OpsPage, OpsSources
    from onceonly.operations.ops_template import render
    from onceonly.processors.health import WebhookHealth

    sources = OpsSources(trace=trace_source, skips=trace_source.recent_skips)
    ops = OpsPage(settings, WebhookHealth(None), sources)
    seconds, sections = [], ""
    for _ in range(runs):
        started = time.monotonic()
        view = asyncio.run(ops.gather(key))
        render(view)
        seconds.append(time.monotonic() - started)
        sections = "; ".join(
            f"{name}: {read.error or read.source or 'read'}"
            for name, read in (("drafts", view.drafts), ("usage", view.usage))
            if read is not None
        )
    console.print(
        f"operator page ({name}, {runs} runs): p50 {percentile(seconds, 0.5):.2f} s, "
        f"slowest {max(seconds):.2f} s; {sections}"
    )


def build(settings: Settings, index_dir: Path, cold: bool = True) -> None:
    """The index built from a cold start, in this process: its rate and its disk; or, kept
    from a run before, caught up with what that run's commands wrote."""
    from onceonly.foundation.kafka import Connection
    from onceonly.operations.index import IndexStore, one_pass

    store = IndexStore.writer(index_dir)
    done = one_pass(Connection.from_settings(settings), settings, store)
    store.close()
    built = sum(done.read.values())
    disk = _disk_mb(index_dir)
    console.print(
        f"index build (cold): {built:,} records in {done.seconds:.1f} s = "
        f"{built / done.seconds:,.0f} records/s; disk {disk:.1f} MB "
        f"= {disk * 1e6 / max(built, 1):.0f} MB per million records"
        if cold
        else f"index caught up (kept): {built:,} records in {done.seconds:.1f} s, {disk:.0f} MB"
    )
    console.print("  read per topic: " + ", ".join(f"{t} {n:,}" for t, n in done.read.items()))


def write(
    broker: Broker, topics: dict[str, str], records: int, drafts: int, deliveries: int
) -> None:
    """The ledger's records and the deliveries, produced to the bench's topics."""
    topic = topics["ONCEONLY_LEDGER_TOPIC"]
    seconds = produce(broker.bootstrap, topic, ledger_records(records, drafts), records)
    console.print(f"wrote {records:,} ledger records ({drafts} drafts) in {seconds:.1f} s")
    if deliveries:
        topic = topics["ONCEONLY_DELIVERIES_TOPIC"]
        ids = "<m{}@example.com>".format  # message n is the one the ledger's reply n answers
        records = agentmail_records(deliveries, message_id=ids)
        seconds = produce(broker.bootstrap, topic, records, deliveries)
        console.print(f"wrote {deliveries:,} deliveries in {seconds:.1f} s")


def compiled() -> None:
    """onceonly's modules and its libraries' compiled to bytecode, as pip compiles them at
    install: a checkout installed by uv and run with ``PYTHONDONTWRITEBYTECODE`` would
    otherwise compile about 100 modules from source at every command's start (0.15 s)."""
    import compileall
    import sysconfig

    for folder in (ROOT / "onceonly", Path(sysconfig.get_paths()["purelib"])):
        compileall.compile_dir(folder, quiet=2, workers=1)


def collect(opts: Values, broker: Broker, work: Path) -> None:
    records, drafts, scan, runs = opts.records, opts.drafts, opts.scan, opts.runs
    topics = create_topics(broker.bootstrap, 8, "idx")
    index_dir, sizes = work / "index", f"{records} {drafts} {opts.deliveries}"
    built = index_dir / "bench-sizes.txt"  # written once the index is built, in a kept folder
    reused = built.is_file()
    if reused and built.read_text(encoding="ascii") != sizes:
        raise BenchError(f"{work} holds a run of other sizes ({built.read_text()}); use another")
    if not reused:
        write(broker, topics, records, drafts, opts.deliveries)
    compiled()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env |= security_env()
    env |= {"ONCEONLY_KAFKA_BOOTSTRAP": broker.bootstrap, "ONCEONLY_PARTITIONS": "8", **topics}
    settings = topic_settings(broker.bootstrap, 8, topics)

    if reused:  # what the last run's commands wrote (a rejection) read first, as --follow would
        console.print(f"the topics and the index kept in {work}: not written or built again")
    build(settings, index_dir, cold=not reused)
    if opts.keep is not None:
        built.write_text(sizes, encoding="ascii")
    indexing = {**env, "ONCEONLY_INDEX_DIR": str(index_dir)}
    lists = [list_drafts(indexing, work) for _ in range(max(1, runs // 4))]
    indexed = lists[0]
    scanned = list_drafts(env, work) if scan else None
    for name, run in (("index", indexed), ("scan", scanned)):
        if run is not None:
            console.print(
                f"approvals list ({name}): {run.seconds:.2f} s, peak {run.peak_mb:.0f} MB, "
                f"{run.drafts} drafts; {run.source}"
            )
    if len(lists) > 1:
        seconds = [run.seconds for run in lists]
        console.print(
            f"approvals list (index, {len(lists)} runs): p50 {percentile(seconds, 0.5):.2f} s, "
            f"slowest {max(seconds):.2f} s, peak {max(run.peak_mb for run in lists):.0f} MB"
        )
    if scanned is not None:
        console.print(
            f"scan / index: {scanned.seconds / indexed.seconds:.1f}x the time, "
            f"{scanned.peak_mb / indexed.peak_mb:.1f}x the memory"
        )
    # one draft found by key (no worker: the rejection is produced and left waiting, exit 1)
    key = f"reply-bench{records - 1:010d}"
    traces(indexing, work, key, runs)
    if opts.deliveries:
        message = f"<m{opts.deliveries - 1}@example.com>"
        traces(indexing, work, message, runs, "one delivery's message id")
    page(settings.model_copy(update={"index_dir": index_dir}), key, max(1, runs // 4))
    if scan:
        page(settings, key, 1, "scan")
    reject = ("approvals", "reject", key, "--reason", "bench", "--wait", "0")
    for name, run_env in (("index", indexing), ("scan", env))[: 2 if scan else 1]:
        run = timed(run_env, work, *reject, exits=(1,))
        console.print(
            f"approvals reject one draft ({name}): {run.seconds:.2f} s, "
            f"peak {run.peak_mb:.0f} MB; {run.source.splitlines()[0]}"
        )


OPTIONS = (
    Opt("--records", None, 100_000, "Ledger records to write."),
    Opt("--drafts", None, 100, "Of them, drafts awaiting approval."),
    Opt(
        "--scan/--no-scan",
        None,
        True,
        "Also answer by today's whole-ledger scan (91 s and 5.4 GB at 1 million records).",
    ),
    Opt("--runs", None, 20, "Trace runs (a quarter: page and approvals list runs)."),
    Opt("--deliveries", None, 0, "Deliveries to write too (AgentMail)."),
    Opt(
        "--keep",
        click.Path(file_okay=False, path_type=Path),
        None,
        "Keep the broker's data and the index in this folder; run again with the same folder"
        " and sizes, only the commands run (no writes, no build).",
    ),
)
#: no report: what it prints is the output (make bench-index tees it to a file)
main = command(
    Scenario("index", "", OPTIONS, Values, collect),
    "Build rate, approvals list, trace and operator page: the index against today's scan.",
)


if __name__ == "__main__":
    main()

"""``python -m bench.take_over_cost``: the CPU of a take-over's own work (issue 43) over the
ledger records it reads: the last compaction lag (10 min) of a partition's records, at
1,000 replies/s by default (a pending and a sent record each, one key in 1,000 with a late
pending record). Timed beside decoding every record read (its baseline: what the take-over
would cost without ``arbitration.may_be_late``); prints both and their ratio. With
``--broker``, the records of one partition's share (``--partitions``) are produced to a
ledger topic on a real broker and read back by the worker's own reader, in a fresh process:
the read's wall and CPU time and the process's peak memory before and after it."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench._options import Opt, cli
from bench._procs import create_topics, kafka, topic_settings
from onceonly.foundation.settings import Settings
from onceonly.processors.reply.arbitration import late_last_words
from onceonly.schemas.ledger import ReplyRecord, ReplyState

T0 = datetime(2026, 12, 6, tzinfo=UTC)
Rows = list[tuple[int, bytes, bytes | None]]


def ledger_rows(replies: int, text_chars: int, late_every: int) -> Rows:
    """Each reply's pending then sent record, and a late pending of one in ``late_every``."""
    rows: Rows = []
    for i in range(replies):
        key = f"reply-{i:064x}"
        made = T0 + timedelta(milliseconds=i)
        pending = ReplyRecord(
            key, "inbox@agentmail.to", f"<m{i}@x>", f"agentmail:t{i}", ReplyState.PENDING,
            T0, "x" * text_chars, written_at=made,
        )  # fmt: skip
        sent = pending.with_state(
            ReplyState.SENT, sent_message_id=f"<s{i}@x>", written_at=made + timedelta(seconds=1)
        )
        rows += [
            (len(rows), key.encode(), pending.encode()),
            (len(rows) + 1, key.encode(), sent.encode()),
        ]
        if i % late_every == 0:
            rows.append((len(rows), key.encode(), pending.encode()))  # made before the sent
    return rows


def cpu_s(work: Callable[[], object], rounds: int) -> float:
    """The least CPU time of ``rounds`` runs of ``work``."""
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        work()
        best = min(best, time.process_time() - began)
    return best


def _read_back(settings: Settings, end: int) -> tuple[float, float, int, int, int]:
    """In a fresh process: partition 0 read from 0 to ``end`` by the worker's reader, and
    the take-over's work on it. Wall s, CPU s, peak memory (KB) before and after, late."""
    from onceonly.processors.runtime.ledger_topic import ledger_reader

    read, before = ledger_reader(settings), _peak_kb()
    began, cpu = time.perf_counter(), time.process_time()

    async def whole() -> Rows:
        return list(await read(0, 0, end - 1))

    found = late_last_words(asyncio.run(whole()))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return wall, cpu, before, _peak_kb(), len(found)


def _peak_kb() -> int:
    """This process's peak resident memory, KB (``VmHWM``: unlike ``ru_maxrss``, not the
    peak of the process it was forked from before its exec)."""
    status = Path("/proc/self/status").read_text(encoding="ascii")
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))


def on_broker(rows: Rows, partitions: int) -> None:
    """``rows`` produced to partition 0 of a ledger topic on a broker, then read back."""
    from confluent_kafka import Producer

    with tempfile.TemporaryDirectory(prefix="take-over-") as tmp, kafka(Path(tmp)) as broker:
        topics = create_topics(broker.bootstrap, partitions, "take-over")
        settings = topic_settings(broker.bootstrap, partitions, topics)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        for _, key, value in rows:
            while True:
                try:
                    producer.produce(settings.ledger_topic, value, key, partition=0)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush()
        del producer  # closed before the broker stops
        spawn = multiprocessing.get_context("spawn")
        with spawn.Pool(1) as pool:
            wall, cpu, before, after, late = pool.apply(_read_back, (settings, len(rows)))
    print(f"read from the broker and taken over: {wall:.2f} s wall, {cpu:.2f} s of CPU")
    print(f"peak memory: {before / 1024:,.0f} MB before the read, {after / 1024:,.0f} MB after")
    print(f"late last words found: {late:,}")


OPTIONS = (
    Opt("--rate", None, 1000, "Replies per second."),
    Opt("--lag-s", None, 600, "Seconds of records read."),
    Opt("--text-chars", None, 400, "Each reply's length."),
    Opt("--late-every", None, 1000, "One late key in N."),
    Opt("--rounds", None, 3, "Runs of each; the least kept."),
    Opt("--broker", help="Read one partition's share from a real broker.", flag=True),
    Opt("--partitions", None, 8, "With --broker: the share."),
)


@cli(OPTIONS, "Time a take-over's work and decoding everything over the same records.")
def main(rate: int, lag_s: int, text_chars: int, late_every: int, rounds: int, **read: Any) -> None:
    if read["broker"]:
        share = rate * lag_s // read["partitions"]
        rows = ledger_rows(share, text_chars, late_every)
        print(f"{len(rows):,} records of one partition in {read['partitions']}")
        return on_broker(rows, read["partitions"])
    rows = ledger_rows(rate * lag_s, text_chars, late_every)
    found = late_last_words(rows)
    megabytes = sum(len(value or b"") for _, _, value in rows) / 1e6
    take_over = cpu_s(lambda: late_last_words(rows), rounds)
    decode_all = cpu_s(lambda: [json.loads(value or b"null") for _, _, value in rows], rounds)
    print(f"{len(rows):,} records, {megabytes:,.0f} MB; {len(found):,} late last words found")
    print(f"take-over's work:      {take_over:.2f} s of CPU")
    print(f"decoding every record: {decode_all:.2f} s of CPU (baseline)")
    print(f"take-over / baseline:  {take_over / decode_all:.3f}")


if __name__ == "__main__":
    main()

"""``python -m bench.take_over_cost``: the CPU of a take-over's own work (issue 43) over the
ledger records it reads: the last compaction lag (10 min) of a partition's records, at
1,000 replies/s by default (a pending and a sent record each, one key in 1,000 with a late
pending record). Timed beside decoding every record read (its baseline: what the take-over
would cost without ``arbitration.may_be_late``); prints both and their ratio. The read
from the broker is not timed here."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import click

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


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rate", default=1000, show_default=True, help="Replies per second.")
@click.option("--lag-s", default=600, show_default=True, help="Seconds of records read.")
@click.option("--text-chars", default=400, show_default=True, help="Each reply's length.")
@click.option("--late-every", default=1000, show_default=True, help="One late key in N.")
@click.option("--rounds", default=3, show_default=True, help="Runs of each; the least kept.")
def main(rate: int, lag_s: int, text_chars: int, late_every: int, rounds: int) -> None:
    """Time a take-over's work and decoding everything over the same records."""
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

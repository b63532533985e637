"""Dedupe entries written straight to the events changelog (``--takeover-fill changelog``),
with the worker's own functions and encoding, on the partition the producer would pick."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from bench._proc_records import Record, produce
from bench._procs import console


def dedupe_records(count: int, tag: str, now_ms: int | None = None) -> Iterator[Record]:
    """The events changelog's records of ``count`` recorded Stripe events: claim, outcome."""
    from onceonly.processors.dedupe import decisions as dedupe

    now = int(time.time() * 1000) if now_ms is None else now_ms
    for n in range(count):
        key = f"stripe:evt_{tag}{n:010d}".encode()
        position = (n % 8, n)
        claim = dedupe.decide(None, position=position, now_ms=now, replay=False).entry
        assert claim is not None
        done = dedupe.finished(True, position=position, now_ms=now)
        yield key, json.dumps(claim.to_json()).encode(), []
        yield key, json.dumps(done.to_json()).encode(), []


def fill_changelog(bootstrap: str, app_id: str, count: int, tag: str) -> float:
    """Produce ``count`` entries (2 records each) to ``<app_id>-events-changelog``; seconds."""
    topic = f"{app_id}-events-changelog"
    console.print(f"(6) writing {count:,} dedupe entries ({2 * count:,} records) to {topic} …")
    seconds = produce(bootstrap, topic, dedupe_records(count, tag), 2 * count)
    console.print(f"(6) written in {seconds:.1f} s")
    return seconds

"""The processor benchmark's baseline: a plain faust agent, built as onceonly's App, that only
counts events. ``python -m bench._plain_faust SETTINGS`` (one JSON object); it writes
``out`` at its first and N-th event: ``{"started", "first", "last", "count"}``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import faust


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.replace(partial, path)


def build(args: argparse.Namespace) -> faust.App:
    started = time.time()
    brokers = [f"kafka://{host.strip()}" for host in args.bootstrap.split(",")]
    app = faust.App(
        args.app_id,
        broker=brokers,
        store="memory://",
        datadir=str(args.data_dir),
        web_enabled=False,
        topic_partitions=args.partitions,
        autodiscover=False,
        worker_redirect_stdouts=False,
        broker_session_timeout=10,
        broker_heartbeat_interval=1,
        stream_wait_empty=True,
    )
    topic = app.topic(
        args.topic,
        partitions=args.partitions,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    out = Path(args.out)
    expect = int(args.expect)

    async def count(stream: Any) -> None:
        seen = 0
        first = 0.0
        async for _event in stream.events():
            seen += 1
            if seen == 1:
                first = time.time()
                _write(out, {"started": started, "first": first, "last": 0.0, "count": 1})
            if seen == expect:
                last = time.time()
                _write(out, {"started": started, "first": first, "last": last, "count": seen})

    app.agent(topic, name="bench.count", concurrency=1)(count)
    return app


def main(argv: list[str] | None = None) -> None:
    args = argparse.Namespace(**json.loads((sys.argv[1:] if argv is None else argv)[0]))
    faust.Worker(build(args), loglevel=args.loglevel).execute_from_commandline()


if __name__ == "__main__":
    main()

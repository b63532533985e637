"""The open loop of the ingest benchmark: ``bench/openloop``, a small Go program.

Arrivals are scheduled by the clock at a fixed rate, whatever the server does; latency
counts from each request's *scheduled* time, so a server that stalls is charged for the
requests queued behind the stall (no coordinated omission). The generator must keep up
for that latency to be the server's: the first one, asyncio + aiohttp, spent 131 µs of
CPU per request and sent requests up to 174 ms late (p99) at 4,069/s on this machine's
two cores, which it shares with the server and the broker. This one writes each request
as bytes prepared up front on one of a fixed set of keep-alive connections, with one
thread running Go code (GOMAXPROCS=1): 60-70 µs per request at 3,500/s here (Go's own
net/http client, on two threads, took 97). It needs nothing but Go's standard library
(``go build`` makes no download); Go is installed from Debian's ``golang-go`` where
missing, as wrk is.

* :func:`build_generator` compiles it into the run directory;
* :func:`write_pool` writes the signed deliveries as JSON lines, which it reads;
* :func:`open_loop` runs it, with the CPU window opened once it starts the clock, and
  reads its figures back into a :class:`~bench._load.Sample`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench._load import Delivery, Sample
from bench._procs import BenchError, CpuWindow, debian_command

SOURCE = Path(__file__).with_name("openloop")
#: What the generator prints on standard error when its clock starts.
STARTED = "openloop: clock started"
#: What it prints once its figures are written; it then waits for its stdin to close.
DONE = "openloop: done"
#: Go where Debian's package or the upstream tarball puts it, when it is not on PATH.
GO_PATHS = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


def build_generator(out_dir: Path) -> Path:
    """``go build`` of :data:`SOURCE` into ``out_dir``; the path of the binary."""
    go = debian_command("go", "golang-go", also=GO_PATHS)
    binary = out_dir / "openloop"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    done = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=SOURCE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"go build of {SOURCE} failed:\n{done.stderr.strip()}")
    return binary


def write_pool(pool: Sequence[Delivery], path: Path) -> None:
    """The deliveries as the generator reads them: one ``{"body", "headers"}`` a line."""
    with path.open("w", encoding="utf-8") as out:
        for delivery in pool:
            line = {"body": delivery.body.decode(), "headers": delivery.headers}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def sample_of(figures: dict[str, object]) -> Sample:
    """The generator's JSON output as a :class:`~bench._load.Sample`."""
    statuses = figures["statuses"]
    latencies = figures["latencies"]
    lags = figures["send_lag"]
    duration = figures["duration_s"]
    if not (isinstance(statuses, dict) and isinstance(latencies, list) and isinstance(lags, list)):
        raise BenchError(f"the open-loop generator wrote figures of an unknown shape: {figures!r}")
    sample = Sample(
        duration_s=float(duration),  # type: ignore[arg-type]
        latencies=[float(x) for x in latencies],
        statuses=Counter({str(k): int(v) for k, v in statuses.items()}),
        send_lag=[float(x) for x in lags],
    )
    sample.pool_wrapped = bool(figures.get("pool_wrapped", False))
    return sample


async def open_loop(
    binary: Path,
    url: str,
    pool: Sequence[Delivery],
    *,
    rate: float,
    duration_s: float,
    concurrency: int,
    warm_url: str,
    window: CpuWindow | None = None,
) -> Sample:
    """Delivery ``i`` due at ``start + i / rate`` for ``duration_s``, over ``concurrency``
    keep-alive connections (each opened first with a GET of ``warm_url``). ``window``, if
    given, measures ``duration_s`` from the clock's start, with the generator as ``load``."""
    work = binary.parent
    deliveries, figures = work / "openloop-pool.jsonl", work / "openloop-figures.json"
    write_pool(pool, deliveries)
    argv = [
        str(binary),
        f"-url={url}",
        f"-warm-url={warm_url}",
        f"-input={deliveries}",
        f"-output={figures}",
        f"-rate={rate}",
        f"-duration={duration_s}",
        f"-connections={concurrency}",
    ]
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(*argv, stdin=pipe, stderr=pipe)
    assert process.stderr is not None and process.stdin is not None
    said: list[str] = []
    measuring: asyncio.Task[None] | None = None
    while line := (await process.stderr.readline()).decode(errors="replace"):
        said.append(line)
        if STARTED in line and window is not None:
            window.pids["load"] = process.pid
            measuring = asyncio.create_task(window.measure(0.0, duration_s))
        elif DONE in line:
            if measuring is not None:
                await measuring  # the generator waits for its stdin to close
            process.stdin.close()
    code = await process.wait()
    if measuring is not None and not measuring.done():
        measuring.cancel()  # it exited before it was done: no figures to measure
    if code != 0:
        raise BenchError(f"the open-loop generator exited with {code}:\n{''.join(said[-20:])}")
    return sample_of(json.loads(figures.read_text(encoding="utf-8")))

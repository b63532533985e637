"""The open loop of the ingest benchmark: ``bench/openloop``, a small Go program.

Arrivals are scheduled by the clock at a fixed rate and latency counts from each request's
scheduled time (no coordinated omission). Go keeps up where asyncio + aiohttp did not
(131 µs of CPU per request against 60-80 µs); it reports its own lateness apart.
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
from bench._procs import BenchError, CpuWindow, debian_command, reap

SOURCE = Path(__file__).with_name("openloop")
#: What the generator prints on standard error when its clock starts.
STARTED = "openloop: clock started"
#: What it prints once its figures are written; it then waits for its stdin to close.
DONE = "openloop: done"
#: Go where Debian's package or the upstream tarball puts it, when it is not on PATH.
GO_PATHS = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


#: Go builds with the toolchain at hand, with no module download
GO_ENV = {"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}


def go_command() -> str:
    """The path of ``go``; Debian's golang-go is installed where it is missing."""
    return debian_command("go", "golang-go", also=GO_PATHS)


def build_generator(out_dir: Path) -> Path:
    """``go build`` of :data:`SOURCE` into ``out_dir``; the path of the binary."""
    binary = out_dir / "openloop"
    env = {**os.environ, **GO_ENV}
    done = subprocess.run(
        [go_command(), "build", "-o", str(binary), "."],
        cwd=SOURCE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(
            f"go build of {SOURCE} failed (it needs Go 1.19 or newer, `go version`; "
            f"run `go vet` there for the same errors):\n{done.stderr.strip()}"
        )
    return binary


def write_pool(pool: Sequence[Delivery], path: Path) -> None:
    """The deliveries as the generator reads them: one ``{"body", "headers"}`` a line."""
    with path.open("w", encoding="utf-8") as out:
        for delivery in pool:
            line = {"body": delivery.body.decode(), "headers": delivery.headers}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def _floats(figures: dict[str, object], key: str) -> list[float]:
    values = figures.get(key)
    if not isinstance(values, list):
        raise BenchError(
            f"the open-loop generator's figures have no list {key!r}: rebuild it from "
            f"{SOURCE} (the benchmark does at each run) and check that it matches this checkout"
        )
    return [float(x) for x in values]


def sample_of(figures: dict[str, object]) -> Sample:
    """The generator's JSON output as a :class:`~bench._load.Sample`."""
    statuses = figures.get("statuses")
    duration = figures.get("duration_s")
    if not isinstance(statuses, dict) or not isinstance(duration, int | float):
        raise BenchError(
            f"the open-loop generator wrote figures without statuses or duration_s: rebuild "
            f"it from {SOURCE} and check that it matches this checkout ({figures!r:.200})"
        )
    sample = Sample(
        duration_s=float(duration),
        latencies=_floats(figures, "latencies"),
        statuses=Counter({str(k): int(v) for k, v in statuses.items()}),
        send_lag=_floats(figures, "send_lag"),
        dispatch_lag=_floats(figures, "dispatch_lag"),
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
    try:
        code, said = await _follow(process, window, duration_s)
    finally:
        await reap(process)  # cancelled, or the CPU window failed: stop it
    if code != 0:
        raise BenchError(f"the open-loop generator exited with {code}:\n{''.join(said[-20:])}")
    return sample_of(json.loads(figures.read_text(encoding="utf-8")))


async def _follow(
    process: asyncio.subprocess.Process, window: CpuWindow | None, duration_s: float
) -> tuple[int, list[str]]:
    """Read what the generator says: open ``window`` when its clock starts, close its
    stdin once it is done (after the window); its exit code and its lines."""
    assert process.stderr is not None and process.stdin is not None
    said: list[str] = []
    measuring: asyncio.Task[None] | None = None
    try:
        while line := (await process.stderr.readline()).decode(errors="replace"):
            said.append(line)
            if STARTED in line and window is not None:
                window.pids["load"] = process.pid
                measuring = asyncio.create_task(window.measure(0.0, duration_s))
            elif DONE in line:
                if measuring is not None:
                    await measuring  # the generator waits for its stdin to close
                process.stdin.close()
        return await process.wait(), said
    finally:
        if measuring is not None and not measuring.done():
            measuring.cancel()  # it exited before it was done: no figures to measure

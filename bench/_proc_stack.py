"""The processor benchmark's processes: environment, metrics scrape, RSS, liveness, progress."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench._procs import BenchError, ServerProcess, alive, tree_pids

T = TypeVar("T")

#: How long without progress before a phase is declared stuck.
STALL_S = 90.0


def base_env(extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without any ONCEONLY_* variable (nor an AgentMail key)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("ONCEONLY_") and k.upper() != "AGENTMAIL_API_KEY"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def ingest_env(
    bootstrap: str, partitions: int, port: int, run_dir: Path, topics: dict[str, str], **more: str
) -> dict[str, str]:
    """``onceonly ingest``'s settings: on ``port``, against the broker and ``topics``."""
    return {
        "ONCEONLY_KAFKA_BOOTSTRAP": bootstrap,
        "ONCEONLY_PARTITIONS": str(partitions),
        "ONCEONLY_INGEST_HOST": "127.0.0.1",
        "ONCEONLY_INGEST_PORT": str(port),
        "ONCEONLY_RUN_DIR": str(run_dir),
        "ONCEONLY_LOG_LEVEL": "WARNING",
        **topics,
        **more,
    }


def serve(name: str, module: str, log: Path, *args: str) -> tuple[ServerProcess, int]:
    """``python -m <module> <args> --port <a free port>`` started and answering ``/healthz``:
    the process (the caller stops it) and its port."""
    from devstack.ports import free_port

    port = free_port()
    argv = [sys.executable, "-m", module, *args, "--port", str(port)]
    process = ServerProcess(name, argv, base_env({}), log)
    process.start()
    try:
        asyncio.run(process.wait_ready(f"http://127.0.0.1:{port}/healthz"))
    except BaseException:
        process.stop()
        raise
    return process, port


def serve_mail(log: Path) -> tuple[ServerProcess, int]:
    """The instant mail server (:mod:`bench._instant_mail`), as :func:`serve` starts it."""
    return serve("instant mail server", "bench._servers", log, "mail")


def get_json(url: str, timeout_s: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def scrape(port: int) -> dict[str, float] | None:
    """The /metrics samples of the worker (or ingest) on ``port``: :func:`samples`; None if it
    does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return samples(response.read().decode())
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


def samples(exposition: str) -> dict[str, float]:
    """A /metrics text's samples: name with labels -> value."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def counters(found: Mapping[str, float], *prefixes: str) -> dict[str, float]:
    """The samples whose names start with one of ``prefixes``, a counter's ``_created`` left out."""
    return {k: v for k, v in found.items() if k.startswith(prefixes) and "_created" not in k}


def histogram_mean(found: Mapping[str, float], name: str) -> float:
    """A histogram's mean from its ``_sum`` and ``_count`` (NaN with no observation)."""
    count = found.get(f"{name}_count", 0.0)
    return found.get(f"{name}_sum", math.nan) / count if count else math.nan


_BUCKET = re.compile(r'^(?P<name>\w+)_bucket\{(?:[^}]*,)?le="(?P<le>[^"]+)"(?:,[^}]*)?\}$')


def histogram_buckets(samples: Mapping[str, float], name: str) -> list[tuple[float, float]]:
    """A Prometheus histogram's ``(upper bound, cumulative count)`` pairs, by bound, summed
    over its other labels (ingest's per provider)."""
    out: dict[float, float] = {}
    for key, value in samples.items():
        found = _BUCKET.match(key)
        if found is not None and found.group("name") == name:
            bound = float(found.group("le"))  # float("+Inf") is inf
            out[bound] = out.get(bound, 0.0) + value
    return sorted(out.items())


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The ``q`` quantile of cumulative buckets as Prometheus' ``histogram_quantile``:
    linear within the bucket it falls in (from 0 for the first); the largest finite
    bound if it falls in ``+Inf``; NaN without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def bucket_of(value: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The upper bound of the bucket ``value`` falls in (inf past the last finite one)."""
    return next((bound for bound, _ in buckets if value <= bound), math.inf)


def tree_memory_mb(pid: int, file: str, keys: tuple[str, ...]) -> list[float]:
    """The kB figures ``keys`` of ``/proc/<pid>/<file>`` (VmRSS and VmHWM of ``status``, Pss
    of ``smaps_rollup``: shared pages counted once, split among the processes that map
    them), summed over ``pid`` and its live descendants, in MB."""
    kb = dict.fromkeys(keys, 0)
    for member in tree_pids(pid):
        try:
            text = Path(f"/proc/{member}/{file}").read_text(encoding="ascii")
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name in kb:
                kb[name] += int(value.split()[0])
    return [kb[key] / 1024 for key in keys]


def group_rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB of ``pid`` (the worker) and any child it started."""
    rss, hwm = tree_memory_mb(pid, "status", ("VmRSS", "VmHWM"))
    return rss, hwm


def kill_hard(process: ServerProcess) -> None:
    """SIGKILL the process group, as a crash would, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.stop()  # reaps it: the group is already gone


def check_alive(process: ServerProcess, what: str) -> None:
    if process.process is None or not alive(process.pid):
        raise BenchError(f"{process.name} exited while {what}; its output:\n{process.log_tail()}")


def poll(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, every_s: float) -> T:
    """``read()`` every ``every_s`` until ``done`` says so of it or ``timeout_s`` has passed;
    its last value."""
    deadline = time.monotonic() + timeout_s
    while not done(value := read()) and time.monotonic() < deadline:
        time.sleep(every_s)
    return value


def wait_progress(
    read: Callable[[], int],
    target: int,
    *,
    what: str,
    process: ServerProcess,
    every_s: float,
    on_sample: Callable[[int], None] | None = None,
    stall_s: float = STALL_S,
) -> None:
    """Poll ``read()`` until it reaches ``target``; fail if it stops moving for ``stall_s``."""
    last_value = -1
    last_move = time.monotonic()
    while True:
        value = read()
        if on_sample is not None:
            on_sample(value)
        if value >= target:
            return
        if value != last_value:
            last_value, last_move = value, time.monotonic()
        elif time.monotonic() - last_move > stall_s:
            raise BenchError(
                f"{what}: stuck at {value:,} of {target:,} for {stall_s:g} s; "
                f"{process.name} output:\n{process.log_tail()}"
            )
        check_alive(process, what)
        time.sleep(every_s)

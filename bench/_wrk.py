"""wrk, the closed-loop load generator of the ingest benchmark (Debian's ``wrk``, installed
where missing): a Lua script of the signed pool, its output parsed, a warm-up then the
measured run with a CPU window that names wrk ``load``."""

from __future__ import annotations

import asyncio
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from bench._load import Delivery, Sample
from bench._procs import BenchError, CpuWindow, debian_command, reap

#: What the script prints, flushed, once a thread's requests are formatted: the runner
#: starts its CPU window only after every thread printed it (wrk starts the clock then).
READY = "onceonly-bench: wrk thread ready"
#: Deliveries per Lua function: LuaJIT allows at most 65,536 constants per function.
CHUNK = 500
#: Seconds of the measured run before the CPU window opens and after it closes.
LEAD_S = 0.5
TAIL_S = 0.5


def _escape(byte: int) -> str:
    char = chr(byte)
    if char in '"\\':
        return "\\" + char
    return char if 0x20 <= byte < 0x7F else f"\\{byte:03d}"


#: Each byte (as the latin-1 character of that code) to its form inside a Lua literal.
_LUA_ESCAPES = {byte: _escape(byte) for byte in range(256)}


def lua_string(data: bytes) -> str:
    """``data`` as a double-quoted Lua string literal: printable ASCII as is, except ``"``
    and ``\\``; every other byte as a three-digit decimal escape (``\\010``), so that a
    digit after it is never read as part of the escape."""
    return '"' + data.decode("latin-1").translate(_LUA_ESCAPES) + '"'


def host_header(url: str) -> str:
    """The Host header wrk would send for ``url``: host, and port when the URL names one."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


def _entry(delivery: Delivery, host: str) -> str:
    headers = {"Host": host, **delivery.headers}
    table = ", ".join(
        f"[{lua_string(k.encode())}] = {lua_string(v.encode())}" for k, v in headers.items()
    )
    return f"add({lua_string(delivery.body)}, {{{table}}})"


_PROLOGUE = """\
-- Written by bench._wrk: {count} signed deliveries, POSTed in turn to {path}.
-- wrk -s <this> <url> -- <offset> <threads>: each thread starts at its own offset.
local path = {path_literal}
local pool = {{}}
local function add(body, headers) pool[#pool + 1] = {{body, headers}} end
"""

_EPILOGUE = """\
local requests = {{}}
local next_one = 0
local threads_seen = 0

function setup(thread)
  thread:set("thread_index", threads_seen)
  threads_seen = threads_seen + 1
end

function init(args)
  for n, delivery in ipairs(pool) do
    requests[n] = wrk.format("POST", path, delivery[2], delivery[1])
  end
  pool = nil
  local offset = tonumber(args[1]) or 0
  local threads = tonumber(args[2]) or 1
  local index = thread_index or 0
  -- wrk calls request() once on the first thread, to check it, before it sends anything
  local checked = index == 0 and 1 or 0
  next_one = (offset + index * math.floor(#requests / threads) - checked) % #requests
  io.stdout:write({ready}, "\\n")
  io.stdout:flush()
end

function request()
  next_one = next_one % #requests + 1
  return requests[next_one]
end
"""


def lua_script(pool: Sequence[Delivery], url: str) -> str:
    """A wrk script that POSTs ``pool``'s deliveries to ``url``'s path in turn, each with
    its headers and a Host header (``wrk.format`` with a headers table adds none of its
    own when the table is built before wrk sets its default)."""
    if not pool:
        raise BenchError("wrk needs at least one delivery to send")
    path = urlsplit(url).path or "/"
    host = host_header(url)
    lines = [_PROLOGUE.format(count=len(pool), path=path, path_literal=lua_string(path.encode()))]
    for start in range(0, len(pool), CHUNK):
        lines.append(";(function()")  # ";": not a call of the line before
        lines.extend(_entry(d, host) for d in pool[start : start + CHUNK])
        lines.append("end)()")
    lines.append(_EPILOGUE.format(ready=lua_string(READY.encode())))
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class WrkOutput:
    """What one ``wrk --latency`` run printed."""

    requests: int  #: answers received (2xx or not)
    duration_s: float
    non_2xx: int  #: answers with a status above 399, as wrk counts them
    errors: dict[str, int]  #: socket errors: connect, read, write, timeout
    latency_ms: dict[float, float]  #: percentile (0.5, 0.75, 0.9, 0.99) to milliseconds


_TIME_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_SUMMARY = re.compile(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", re.MULTILINE)
_PERCENTILE = re.compile(r"^\s*(\d+(?:\.\d+)?)%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.MULTILINE)
_SOCKET = re.compile(
    r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", re.MULTILINE
)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")


def _ms(value: str, unit: str) -> float:
    return float(value) * _TIME_UNITS[unit]


def parse_output(text: str) -> WrkOutput:
    """The figures of ``wrk --latency`` output; :class:`BenchError` if it has none."""
    summary = _SUMMARY.search(text)
    if summary is None:
        raise BenchError(f"wrk printed no summary line ('N requests in T'); it printed:\n{text}")
    distribution = text.partition("Latency Distribution")[2]
    latency = {
        float(p) / 100: _ms(v, u)
        for p, v, u in _PERCENTILE.findall(distribution.split("requests in")[0])
    }
    socket = _SOCKET.search(text)
    names = ("connect", "read", "write", "timeout")
    errors = dict(zip(names, (int(n) for n in socket.groups()), strict=True)) if socket else {}
    non_2xx = _NON_2XX.search(text)
    return WrkOutput(
        requests=int(summary.group(1)),
        duration_s=_ms(summary.group(2), summary.group(3)) / 1000,
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors={name: errors.get(name, 0) for name in names},
        latency_ms=latency,
    )


@dataclass(slots=True)
class WrkSample(Sample):
    """A closed loop measured by wrk: statuses are ``2xx``, ``not 2xx`` and the socket
    errors; the percentiles are wrk's (p50, p75, p90, p99; NaN for any other)."""

    ok_status: ClassVar[str] = "2xx"
    distribution_ms: dict[float, float] = field(default_factory=dict)

    def percentile_ms(self, q: float) -> float:
        return self.distribution_ms.get(q, math.nan)


def sample_of(out: WrkOutput, pool_size: int, sent_before: int = 0) -> WrkSample:
    """The :class:`WrkSample` of one run; ``sent_before``: what the warm-up sent from the
    same pool (the pool wrapped if both together sent more than it holds)."""
    sample = WrkSample(duration_s=out.duration_s, distribution_ms=dict(out.latency_ms))
    sample.statuses["2xx"] = out.requests - out.non_2xx
    if out.non_2xx:
        sample.statuses["not 2xx"] = out.non_2xx
    for name, n in out.errors.items():
        if n:
            sample.statuses[f"socket {name} error"] = n
    sample.pool_wrapped = sent_before + out.requests > pool_size
    return sample


def wrk_binary() -> str:
    """The path of ``wrk``; installs Debian's package with apt-get as root if missing."""
    return debian_command("wrk", "wrk")


@dataclass(frozen=True, slots=True)
class WrkLoad:
    """How wrk loads a server: ``connections`` keep-alive connections on ``threads``."""

    connections: int
    threads: int = 1
    timeout_s: int = 30


def wrk_argv(
    binary: str, script: Path, url: str, load: WrkLoad, seconds: int, offset: int
) -> list[str]:
    return [
        binary,
        f"--threads={load.threads}",
        f"--connections={load.connections}",
        f"--duration={seconds}s",
        f"--timeout={load.timeout_s}s",
        "--latency",
        f"--script={script}",
        url,
        "--",
        str(offset),
        str(load.threads),
    ]


async def _run(
    argv: list[str], threads: int, window: CpuWindow | None, duration_s: float
) -> WrkOutput:
    """Run wrk; once each thread is ready, measure ``window`` (with wrk's pid as ``load``)
    for ``duration_s``, ``LEAD_S`` into the run."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        lines: list[str] = []
        ready = 0
        while ready < threads:
            line = (await process.stdout.readline()).decode(errors="replace")
            if not line:
                break
            lines.append(line)
            ready += READY in line
        if window is not None and ready == threads:
            window.pids["load"] = process.pid
            await window.measure(LEAD_S, duration_s)
        rest, errors = await process.communicate()
    finally:
        await reap(process)
    text = "".join(lines) + rest.decode(errors="replace")
    if process.returncode != 0 or ready < threads:
        raise BenchError(f"wrk failed (exit {process.returncode}): {errors.decode()}{text}")
    return parse_output(text)


def measured_run_s(duration_s: float) -> int:
    """wrk's measured run, in whole seconds (all wrk takes): the CPU window and a margin."""
    return math.ceil(LEAD_S + duration_s + TAIL_S)


async def wrk_closed_loop(
    url: str,
    pool: Sequence[Delivery],
    load: WrkLoad,
    *,
    warmup_s: float,
    duration_s: float,
    window: CpuWindow,
) -> WrkSample:
    """Peak rate: a warm-up run of ``warmup_s`` (whole seconds, rounded up; none for 0),
    then the measured run, whose CPU ``window`` covers ``duration_s`` inside it."""
    binary = wrk_binary()
    with tempfile.TemporaryDirectory(prefix="onceonly-wrk-") as tmp:
        script = Path(tmp) / "deliveries.lua"
        script.write_text(lua_script(pool, url), encoding="ascii")
        sent = 0
        if warmup_s > 0:
            warm = wrk_argv(binary, script, url, load, math.ceil(warmup_s), 0)
            sent = (await _run(warm, load.threads, None, 0)).requests
        argv = wrk_argv(binary, script, url, load, measured_run_s(duration_s), sent)
        out = await _run(argv, load.threads, window, duration_s)
    return sample_of(out, len(pool), sent)

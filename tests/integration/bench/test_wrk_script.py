"""wrk itself runs the benchmark's Lua script against a server that records what it gets.

No broker: a local aiohttp server on a free port. wrk is Debian's package, which the
benchmark installs where it is missing (bench._wrk.wrk_binary).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench._load import Delivery, sign_pool
from bench._wrk import (
    CHUNK,
    WrkLoad,
    _run,
    lua_script,
    wrk_argv,
    wrk_binary,
    wrk_closed_loop,
)
from tests.integration.bench.conftest import NamesLoad, Recorder

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(scope="module")
def pool() -> list[Delivery]:
    # more than two of the script's chunks, so that the chunks must parse one after another
    return sign_pool(SECRET, 2 * CHUNK + 7)


@pytest.fixture(scope="module")
def wrk() -> str:
    if shutil.which("wrk") is None and os.geteuid() != 0:
        pytest.skip("wrk is not installed, and installing it needs root")
    return wrk_binary()


@pytest.fixture
def script(pool: list[Delivery], recorder: Recorder, tmp_path: Path) -> Path:
    """The benchmark's Lua script of ``pool``, addressed to the recorder."""
    script = tmp_path / "deliveries.lua"
    script.write_text(lua_script(pool, recorder.url), encoding="ascii")
    return script


async def test_wrk_sends_the_pool_in_turn_from_the_offset_each_as_signed(
    wrk: str, pool: list[Delivery], recorder: Recorder, script: Path
) -> None:
    url, received = recorder.url, recorder.received
    offset = len(pool) - 5  # the run wraps round to the start of the pool

    out = await _run(wrk_argv(wrk, script, url, WrkLoad(1), 1, offset), 1, None, 0)

    # one connection: at most one request was still unanswered when wrk stopped
    assert out.requests <= len(received) <= out.requests + 1
    assert len(received) > 10
    for n, (body, headers) in enumerate(received):
        sent = pool[(offset + n) % len(pool)]
        assert body == sent.body
        assert {k: headers[k] for k in sent.headers} == sent.headers


async def test_every_request_names_the_host(wrk: str, recorder: Recorder, script: Path) -> None:
    url, received = recorder.url, recorder.received

    await _run(wrk_argv(wrk, script, url, WrkLoad(1), 1, 0), 1, None, 0)

    assert {headers["Host"] for _, headers in received} == {url.split("/")[2]}


async def test_the_measured_run_s_cpu_window_names_wrk_as_the_load(
    wrk: str, pool: list[Delivery], recorder: Recorder
) -> None:
    url = recorder.url
    window = NamesLoad({"load": None})

    sample = await wrk_closed_loop(url, pool, WrkLoad(4), warmup_s=0, duration_s=1, window=window)

    assert window.load_command == "wrk"
    assert window.percent["load"] > 0
    assert sample.ok > 0 and sample.failed == 0

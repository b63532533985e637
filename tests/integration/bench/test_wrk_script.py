"""wrk itself runs the benchmark's Lua script against a server that records what it gets.

No broker: a local aiohttp server on a free port. wrk is Debian's package, which the
benchmark installs where it is missing (bench._wrk.wrk_binary).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web
from multidict import CIMultiDict

from bench._load import Delivery, sign_pool
from bench._procs import CpuWindow
from bench._wrk import (
    CHUNK,
    WrkLoad,
    _run,
    lua_script,
    wrk_argv,
    wrk_binary,
    wrk_closed_loop,
)
from devstack.ports import free_port

ROUTE = "/webhooks/agentmail"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

Received = list[tuple[bytes, Mapping[str, str]]]


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, Received]]:
    """A server that answers 204 and keeps every body with its headers, in order."""
    received: Received = []

    async def handler(request: web.Request) -> web.StreamResponse:
        received.append((await request.read(), CIMultiDict(request.headers)))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post(ROUTE, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}{ROUTE}", received
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def pool() -> list[Delivery]:
    # more than two of the script's chunks, so that the chunks must parse one after another
    return sign_pool(SECRET, 2 * CHUNK + 7)


@pytest.fixture(scope="module")
def wrk() -> str:
    if shutil.which("wrk") is None and os.geteuid() != 0:
        pytest.skip("wrk is not installed, and installing it needs root")
    return wrk_binary()


async def test_wrk_sends_the_pool_in_turn_from_the_offset_each_as_signed(
    wrk: str, pool: list[Delivery], recorder: tuple[str, Received], tmp_path: Path
) -> None:
    url, received = recorder
    script = tmp_path / "deliveries.lua"
    script.write_text(lua_script(pool, url), encoding="ascii")
    offset = len(pool) - 5  # the run wraps round to the start of the pool

    out = await _run(wrk_argv(wrk, script, url, WrkLoad(1), 1, offset), 1, None, 0)

    # one connection: at most one request was still unanswered when wrk stopped
    assert out.requests <= len(received) <= out.requests + 1
    assert len(received) > 10
    for n, (body, headers) in enumerate(received):
        sent = pool[(offset + n) % len(pool)]
        assert body == sent.body
        assert {k: headers[k] for k in sent.headers} == sent.headers


async def test_every_request_names_the_host(
    wrk: str, pool: list[Delivery], recorder: tuple[str, Received], tmp_path: Path
) -> None:
    url, received = recorder
    script = tmp_path / "deliveries.lua"
    script.write_text(lua_script(pool, url), encoding="ascii")

    await _run(wrk_argv(wrk, script, url, WrkLoad(1), 1, 0), 1, None, 0)

    assert {headers["Host"] for _, headers in received} == {url.split("/")[2]}


class _NamesLoad(CpuWindow):
    """A CPU window that notes which program its ``load`` was when it began."""

    load_command = ""

    def begin(self) -> None:
        pid = self.pids["load"]
        self.load_command = Path(f"/proc/{pid}/comm").read_text().strip() if pid else "ours"
        super().begin()


async def test_the_measured_run_s_cpu_window_names_wrk_as_the_load(
    wrk: str, pool: list[Delivery], recorder: tuple[str, Received]
) -> None:
    url, _ = recorder
    window = _NamesLoad({"load": None})

    sample = await wrk_closed_loop(url, pool, WrkLoad(4), warmup_s=0, duration_s=1, window=window)

    assert window.load_command == "wrk"
    assert window.percent["load"] > 0
    assert sample.ok > 0 and sample.failed == 0

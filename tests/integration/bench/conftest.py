"""A local aiohttp server that records what the load generators send it (no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from multidict import CIMultiDict

from bench._procs import CpuWindow
from devstack.ports import free_port

ROUTE = "/webhooks/agentmail"


def _peer(request: web.Request) -> tuple[str, int]:
    host, port = request.transport.get_extra_info("peername")[:2]  # type: ignore[union-attr]
    return str(host), int(port)


@dataclass
class Recorder:
    """Answers 204 and keeps every body with its headers, in order; ``stall_s`` holds the
    first POST back that long, ``refuse_every`` answers every n-th POST 503 instead."""

    url: str = ""
    received: list[tuple[bytes, Mapping[str, str]]] = field(default_factory=list)
    #: the client's (host, port) of each GET and of each POST, in order
    get_peers: list[tuple[str, int]] = field(default_factory=list)
    post_peers: list[tuple[str, int]] = field(default_factory=list)
    #: whether a POST came before each GET
    posted_before_get: list[bool] = field(default_factory=list)
    stall_s: float = 0.0
    refuse_every: int = 0

    async def post(self, request: web.Request) -> web.StreamResponse:
        self.received.append((await request.read(), CIMultiDict(request.headers)))
        self.post_peers.append(_peer(request))
        n = len(self.received)
        if n == 1 and self.stall_s:
            await asyncio.sleep(self.stall_s)
        if self.refuse_every and n % self.refuse_every == 0:
            return web.Response(status=503)
        return web.Response(status=204)

    async def get(self, request: web.Request) -> web.StreamResponse:
        self.get_peers.append(_peer(request))
        self.posted_before_get.append(bool(self.received))
        return web.json_response({"status": "ok"})


class NamesLoad(CpuWindow):
    """A CPU window that notes which program its ``load`` was when it began."""

    load_command = ""

    def begin(self) -> None:
        pid = self.pids["load"]
        self.load_command = Path(f"/proc/{pid}/comm").read_text().strip() if pid else "ours"
        super().begin()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    found = Recorder()
    app = web.Application()
    app.router.add_post(ROUTE, found.post)
    app.router.add_get("/healthz", found.get)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    found.url = f"http://127.0.0.1:{port}{ROUTE}"
    try:
        yield found
    finally:
        await runner.cleanup()

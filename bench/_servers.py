"""The two baseline servers of the ingest benchmark, each run as its own process.

``python -m bench._servers bare --port N``
    (a) an aiohttp POST handler that reads the body and answers 204.
``python -m bench._servers svix --port N``
    (b) the same handler plus Svix verification of the raw body and headers
    (:func:`ingest.verify.verify_svix`, which wraps ``svix.webhooks.Webhook``);
    the secret comes from ``ONCEONLY_AGENTMAIL_WEBHOOK_SECRET``, as for ingest.

Both are set up as ingest sets up its site (``AppRunner`` without access log, one
``TCPSite`` on loopback, the default asyncio loop) and answer ``GET /healthz``.
They stop on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web

from ingest.exceptions import VerificationError
from ingest.verify import verify_svix

ROUTE = "/webhooks/agentmail"
SECRET_VARIABLE = "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def bare(request: web.Request) -> web.StreamResponse:
    """(a) Read the body, answer 204."""
    await request.read()
    return web.Response(status=204)


def svix_only(secret: str) -> Handler:
    """(b) Read the body, verify it with Svix, answer 204 (401 if it does not verify)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            verify_svix(body, request.headers, secret)
        except VerificationError:
            return web.Response(status=401)
        return web.Response(status=204)

    return handler


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def serve(handler: Handler, host: str, port: int) -> None:
    app = web.Application()
    app.router.add_post(ROUTE, handler)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._servers")
    parser.add_argument("kind", choices=("bare", "svix"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.kind == "bare":
        handler: Handler = bare
    else:
        secret = os.environ.get(SECRET_VARIABLE)
        if not secret:
            parser.error(f"{SECRET_VARIABLE} must hold the whsec_ secret the load is signed with")
        handler = svix_only(secret)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(handler, args.host, args.port))


if __name__ == "__main__":
    main()

"""The benchmarks' servers, each its own process:
``python -m bench._servers bare|svix|postgres|mail --port N [--dsn DSN --pool-size P]``:
the ingest benchmark's baselines, (a) answers 204, (b) + Svix verification, (d) +
``INSERT ... ON CONFLICT DO NOTHING`` through asyncpg, awaited before the 204, set up as
ingest's site; and the instant mail server (:mod:`bench._instant_mail`). ``GET /healthz``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from onceonly.ingest.exceptions import VerificationError
from onceonly.ingest.verify import verify_svix

ROUTE = "/webhooks/agentmail"


def local_url(port: int) -> str:
    """The base URL of a server under test on this machine's loopback."""
    return f"http://127.0.0.1:{port}"


SECRET_VARIABLE = "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def bare(request: web.Request) -> web.StreamResponse:
    """(a) Read the body, answer 204."""
    await request.read()
    return web.Response(status=204)


async def _verified_body(request: web.Request, secret: str) -> bytes | None:
    """The request's body if it verifies with Svix against ``secret``, None if it does not."""
    body = await request.read()
    try:
        verify_svix(body, request.headers, secret)
    except VerificationError:
        return None
    return body


def svix_only(secret: str) -> Handler:
    """(b) Read the body, verify it with Svix, answer 204 (401 if it does not verify)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if await _verified_body(request, secret) is None:
            return web.Response(status=401)
        return web.Response(status=204)

    return handler


#: The asyncpg pool of (d), set up by :func:`pg_pool` on the application.
POOL: web.AppKey[Any] = web.AppKey("pool", object)


def postgres_insert(secret: str) -> Handler:
    """(d) Read the body, verify it with Svix, INSERT ... ON CONFLICT DO NOTHING, answer 204
    (401 if it does not verify, 400 if it has no event id)."""
    from bench._postgres import INSERT

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await _verified_body(request, secret)
        if body is None:
            return web.Response(status=401)
        try:
            event_id = json.loads(body)["event_id"]
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400)
        await request.app[POOL].execute(INSERT, str(event_id), body.decode())
        return web.Response(status=204)

    return handler


def pg_pool(dsn: str, size: int) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context: the pool of (d), and the table, for the application's lifetime."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        import asyncpg

        from bench._postgres import SCHEMA

        pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size)
        await pool.execute(SCHEMA)
        app[POOL] = pool
        try:
            yield
        finally:
            await pool.close()

    return context


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def serve_until_stopped(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT or SIGTERM."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
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
    parser.add_argument("kind", choices=("bare", "svix", "postgres", "mail"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dsn", help="PostgreSQL to insert into (postgres only)")
    parser.add_argument("--pool-size", type=int, default=16, help="asyncpg connections")
    args = parser.parse_args(argv)
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    if args.kind == "mail":
        from bench._instant_mail import routes

        routes(app)
    elif args.kind == "bare":
        app.router.add_post(ROUTE, bare)
    else:
        secret = os.environ.get(SECRET_VARIABLE)
        if not secret:
            parser.error(f"{SECRET_VARIABLE} must hold the whsec_ secret the load is signed with")
        if args.kind == "svix":
            app.router.add_post(ROUTE, svix_only(secret))
        else:
            if not args.dsn:
                parser.error("postgres needs --dsn")
            app.router.add_post(ROUTE, postgres_insert(secret))
            app.cleanup_ctx.append(pg_pool(args.dsn, args.pool_size))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_until_stopped(app, args.host, args.port))


if __name__ == "__main__":
    main()

"""What ingest allows one client: a body's size and time, idle time, connections at once.

aiohttp 3.14's server, left to its defaults, keeps an idle connection for 3,630 s, gives
a body all the time a client takes to send it, and accepts any number of connections.
Ingest sets what aiohttp has and adds the rest here:

* ``keepalive_timeout`` (``ONCEONLY_INGEST_KEEPALIVE_S``): aiohttp's only timer before a
  request reaches a handler. It starts when a connection is accepted and again after each
  answer, and closes a connection still waiting for a whole request when it fires; so it
  also bounds the time a client has to send its headers (aiohttp has no separate header
  timeout). Header sizes keep aiohttp's limits (8190-byte lines and fields, 128 headers).
* :func:`read_body` (``ONCEONLY_INGEST_READ_TIMEOUT_S``, ``ONCEONLY_MAX_BODY_BYTES``): the
  whole body within a time of its headers, at most so many bytes.
* :class:`ConnectionCap` (``ONCEONLY_INGEST_MAX_CONNECTIONS``), see there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import cast

import structlog
from aiohttp import web

from onceonly.foundation.settings import Settings
from onceonly.ingest.exceptions import IngestError

log = structlog.get_logger("onceonly.ingest")

#: how often, at most, ingest logs that it refuses connections (a flood is one line a while)
REFUSAL_LOG_INTERVAL_S = 10.0
#: how long a refused connection may take to read its 503 before it is closed
REFUSAL_LINGER_S = 1.0


class BodyTooLarge(IngestError):
    check = "body_too_large"


class BodyUnreadable(IngestError):
    """The body cannot be read as sent (a Content-Encoding it does not have, a broken stream)."""

    check = "body_unreadable"


class BodyTimeout(IngestError):
    """The whole body did not arrive within ``ingest_read_timeout_s`` of its headers."""

    check = "body_timeout"


class ClientDisconnected(IngestError):
    """The client closed the connection before it sent the whole body."""

    check = "client_disconnected"


async def read_body(request: web.Request, *, limit: int, timeout_s: float) -> bytes:
    """At most ``limit`` bytes within ``timeout_s``; larger bodies are refused before they
    are read whole, from Content-Length or as soon as the stream passes the limit."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(f"body of {request.content_length} bytes is above {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        if request.content.is_eof():  # the whole body came with its headers: no wait, no timer
            chunks.append(request.content.read_nowait())
            size = len(chunks[0])
            if size > limit:
                raise BodyTooLarge(f"body is above the limit of {limit} bytes")
            return chunks[0]
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"body is above the limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyTimeout(
            f"the body did not arrive within {timeout_s:g} s of its headers; send it at once"
        ) from exc
    except web.RequestPayloadError as exc:
        raise BodyUnreadable(
            f"the body cannot be read as sent ({exc}); send it as the provider does"
        ) from exc
    except ConnectionError as exc:  # aiohttp's "Connection lost" is a ConnectionResetError
        raise ClientDisconnected(
            f"the client closed the connection after {size} bytes of the body"
        ) from exc
    return b"".join(chunks)


def app_runner(app: web.Application, settings: Settings) -> web.AppRunner:
    """The runner of ingest's app: no access log, no signal handlers, ingest's keep-alive."""
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=settings.ingest_keepalive_s,
    )


class ConnectionCap:
    """The protocol factory of ingest's socket: aiohttp's server, up to ``limit`` connections.

    aiohttp has no connection limit, and a TCP backlog only bounds the connections the
    kernel holds before they are accepted, not those that are open. So the cap is checked
    as each connection is accepted, against the connections aiohttp's ``web.Server`` holds
    (its public ``connections``); one past it is answered 503 ``too_many_connections``
    (``Retry-After: 5``) and closed, without being read. Refusing rather than queueing:
    a webhook sender retries a 503, while a connection that waits holds a socket and file
    descriptor all the same, which is what the cap saves. Connections accepted within one
    turn of the event loop are checked against the count before the turn, so a burst can
    pass the cap by the connections accepted in that turn.
    """

    def __init__(self, server: web.Server, limit: int, on_refused: Callable[[], None]) -> None:
        self.server = server
        self.limit = limit
        self.on_refused = on_refused
        self._refused_since_log = 0
        self._logged_at = float("-inf")

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) < self.limit:
            return self.server()
        self.on_refused()
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning(
                "connections refused: ingest holds its maximum of open connections",
                limit=self.limit,
                refused=self._refused_since_log,
                variable="ONCEONLY_INGEST_MAX_CONNECTIONS",
            )
            self._logged_at = now
            self._refused_since_log = 0
        return _Refusal()


def _refusal_bytes() -> bytes:
    body = json.dumps(
        {
            "error": "ingest holds its maximum of open connections; retry later",
            "check": "too_many_connections",
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Retry-After: 5\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


REFUSAL = _refusal_bytes()


class _Refusal(asyncio.Protocol):
    """One connection past the cap: the 503, the end of what we send, then it is closed.

    What the client sends meanwhile is read and dropped rather than left unread: closing
    a socket with unread input resets it, and a reset can destroy the 503 in flight.
    """

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = cast(asyncio.WriteTransport, transport)
        stream.write(REFUSAL)
        if stream.can_write_eof():
            stream.write_eof()
        self._close = asyncio.get_running_loop().call_later(REFUSAL_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client is done too: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._close.cancel()


async def listen(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    max_connections: int,
    on_refused: Callable[[], None],
    reuse_port: bool = False,
) -> asyncio.Server:
    """Listen on ``host:port`` for ``runner``'s app, capped (``runner.setup()`` first).

    In place of ``web.TCPSite``, which hands the runner's server itself to
    ``loop.create_server``: the same, with the cap in front. Close the returned server
    before ``runner.cleanup()``, as a site is stopped first. ``reuse_port``: one of several
    processes on the port (``ONCEONLY_INGEST_PROCESSES``).
    """
    server = runner.server
    if server is None:
        raise RuntimeError("call runner.setup() before listen()")
    cap = ConnectionCap(server, max_connections, on_refused)
    return await asyncio.get_running_loop().create_server(
        cap, host, port, reuse_port=reuse_port or None
    )

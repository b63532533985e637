"""An httpx transport over aiohttp, for the agentmail SDK.

The SDK is built on httpx, whose default transport (httpcore and the pure-Python h11
parser) costs about 1 ms of CPU per call on its own; with aiohttp's C parser the SDK's
whole cost per reply went from 1.5-2.0 ms to 0.9-1.1 ms of CPU here (1,000 replies to
``bench._instant_mail``). The SDK still builds every request and parses every answer;
:class:`ApiClient` takes its plain requests to aiohttp without an httpx ``Request`` in
between (a fifth of the SDK call's CPU again: ``python -m bench.sdk_cost``). It plugs
in through the SDK's own ``httpx_client=`` option::

    AsyncAgentMail(api_key=..., httpx_client=ApiClient(timeout_s=10.0))

:class:`ApiClient` is httpx's ``AsyncClient`` over that transport, keeping no cookies: the
mail API authenticates by header, and httpx would otherwise run every answer through
``http.cookiejar`` looking for ``Set-Cookie`` (about a seventh of the SDK's CPU per call).

aiohttp's errors become httpx's here, so the send policy's one seam
(:func:`onceonly.processors.mail.agentmail.sender.classify`) sees the same exceptions
with either transport.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import httpx


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts (connect, read, write, pool) in aiohttp's terms."""
    given: dict[str, Any] = request.extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None,
        connect=given.get("pool"),
        sock_connect=given.get("connect"),
        sock_read=given.get("read"),
    )


def _mapped(exc: BaseException, request: httpx.Request | None) -> httpx.TransportError:
    """aiohttp's (and asyncio's) errors as the httpx errors they correspond to."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message, request=request)
    return httpx.NetworkError(message, request=request)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests with one pooled :class:`aiohttp.ClientSession` per event loop.

    The session is made on first use, inside the running loop, and made again if a later
    call runs on another loop (a CLI that calls ``asyncio.run`` twice).
    """

    def __init__(self, *, limit: int = 100) -> None:
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_for(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit),
                auto_decompress=False,  # httpx decodes by Content-Encoding itself
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        return await self.exchange(
            request.method, str(request.url), headers, body, _timeout(request), request
        )

    async def exchange(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        timeout: aiohttp.ClientTimeout,
        request: httpx.Request | None = None,
    ) -> httpx.Response:
        """One request on the pooled session; the answer as httpx's, its errors as httpx's
        (``request``: the httpx request it answers, None on :class:`ApiClient`'s direct
        path, which builds none)."""
        session = self._session_for(asyncio.get_running_loop())
        try:
            async with session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
            ) as answer:
                content = await answer.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _mapped(exc, request) from exc
        return httpx.Response(
            answer.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.raw_headers],
            content=content,
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def _json_bytes(value: Any) -> bytes:
    """A JSON body as httpx encodes it (``httpx._content.encode_json``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class _NoCookies(httpx.Cookies):
    """A cookie store that keeps nothing and never parses an answer for cookies."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class ApiClient(httpx.AsyncClient):
    """httpx's ``AsyncClient`` over :class:`AiohttpTransport` (or ``transport``), cookieless.

    The SDK's plain requests (a URL, headers, a JSON body or none, a timeout in seconds:
    every call onceonly makes) skip httpx's request machinery and go to the transport
    directly (:meth:`request`): httpx's ``build_request`` parses and merges the URL, the
    headers and the body into a ``Request`` that the transport takes apart again, about a
    third of the SDK's CPU per reply. The body's bytes are httpx's own encoding of the
    JSON (the mail API compares a key's request with its first one), the headers its
    defaults merged with the SDK's. Anything else (query parameters, files, forms, raw
    content, another transport) goes the whole httpx way. The answer is an httpx
    ``Response`` without a ``request`` (the SDK reads none).
    """

    def __init__(
        self,
        *,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        direct: bool = True,
    ) -> None:
        """``direct``: False sends every request the whole httpx way (the SDK figure's
        baseline in ``bench.processors``)."""
        super().__init__(transport=transport or AiohttpTransport(), timeout=timeout_s)
        self._no_cookies = _NoCookies()
        via = self._transport
        self._direct = via if direct and isinstance(via, AiohttpTransport) else None

    async def request(  # type: ignore[override]
        self,
        method: str,
        url: httpx.URL | str,
        *,
        json: Any | None = None,
        headers: dict[str, Any] | None = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
        **rest: Any,
    ) -> httpx.Response:
        plain = not any(value is not None for value in rest.values())
        if (
            self._direct is None
            or not plain
            or not isinstance(url, str)
            or not url.startswith(("http://", "https://"))
            or not isinstance(timeout, int | float)
        ):
            return await super().request(
                method, url, json=json, headers=headers, timeout=timeout, **rest
            )
        merged = {name.lower(): value for name, value in self.headers.items()}
        body: bytes | None = None
        if json is not None:
            body = _json_bytes(json)
            merged["content-type"] = "application/json"
        for name, value in (headers or {}).items():
            merged[name.lower()] = str(value)
        seconds = float(timeout)
        return await self._direct.exchange(
            method,
            url,
            list(merged.items()),
            body,
            aiohttp.ClientTimeout(
                total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
            ),
        )

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Cookies given to this client are dropped: the mail API does not use them."""

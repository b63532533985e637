"""What the fake API servers share: serving an aiohttp app on this loop, on a thread or
as a process of its own (:meth:`FakeServer.serve`, :func:`command_line`), and for the
fake mail APIs a movable clock, request counts and the injected latency
(:class:`FakeMailServer`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Self, TypeVar
from urllib.parse import unquote

from aiohttp import web

Clock = Callable[[], float]


def command_line(module: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``python -m testkit.fakes.<module>``, with ``--host`` and ``--port``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m testkit.fakes.{module}", description=description
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    return parser


@contextlib.contextmanager
def as_process(module: str, *args: str) -> Iterator[str]:
    """Run ``python -m testkit.fakes.<module> --port 0 args``; yield the base URL it prints.
    On the way out it is terminated, and must have stopped cleanly (exit status 0)."""
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", f"testkit.fakes.{module}", "--port", "0", *args]
    proc = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        status = proc.wait(10)
    if status != 0:
        raise RuntimeError(f"python -m testkit.fakes.{module} exited {status} on SIGTERM")


class FakeServer:
    """Serves :meth:`make_app` on the caller's event loop or on a daemon thread of its own.

    Subclasses set ``name`` (used in errors and the thread's name) and build the app.
    """

    name = "fake server"

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    def make_app(self) -> web.Application:
        raise NotImplementedError

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0 picks a free port) and return the base URL."""
        if self._runner is not None:
            raise RuntimeError(f"{self.name} is already running; call stop() first")
        runner = web.AppRunner(self.make_app(), handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        if not runner.addresses:
            await runner.cleanup()
            raise RuntimeError(f"could not bind {host}:{port}")
        self._runner = runner
        self._base_url = f"http://{host}:{int(runner.addresses[0][1])}"
        return self._base_url

    async def stop(self) -> None:
        """Stop serving (state is kept)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Self]:
        """Serve on this loop (a free port) for the ``async with`` block."""
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

    @contextlib.contextmanager
    def serving_in_thread(self) -> Iterator[Self]:
        """Serve from a thread of its own (a free port) for the ``with`` block."""
        self.start_in_thread()
        try:
            yield self
        finally:
            self.stop_in_thread()

    def start_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve from a daemon thread with its own loop (for blocking SDK clients)."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is already running in a thread")
        loop = asyncio.new_event_loop()
        outcome: list[str | BaseException] = []
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                outcome.append(loop.run_until_complete(self.start(host, port)))
            except Exception as exc:
                outcome.append(exc)
                loop.close()
                return
            finally:
                ready.set()
            loop.run_forever()
            loop.close()

        thread = threading.Thread(target=run, name=self.name.replace(" ", "-"), daemon=True)
        thread.start()
        if not ready.wait(10) or not outcome:
            raise RuntimeError(f"{self.name} thread did not start within 10 s")
        result = outcome[0]
        if isinstance(result, BaseException):
            raise RuntimeError(f"{self.name} could not start: {result!r}") from result
        self._thread, self._thread_loop = thread, loop
        return result

    def stop_in_thread(self) -> None:
        """Stop a server started with :meth:`start_in_thread` and join its thread."""
        loop, thread = self._thread_loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._thread = None
        self._thread_loop = None

    async def serve(self, host: str, port: int) -> None:
        """Serve as a process: print the base URL on stdout, stop on SIGINT or SIGTERM."""
        print(await self.start(host, port), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._base_url


@dataclass
class MailFaults:
    """A fake mail API's runtime fault settings. Counters count down as faults fire."""

    latency_s: float = 0.0  #: how long every API request waits before it is handled
    send_delay_s: float = 0.0  #: between reserving a key and sending
    #: after a successful send, wait this long before answering (the email is out)
    answer_delay_s: float = 0.0
    fail_remaining: int = 0  #: sends still to answer ``fail_status`` without sending
    fail_status: int = 500
    lose_remaining: int = 0  #: sends still to do, then answer 500

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


F = TypeVar("F", bound=MailFaults)
R = TypeVar("R")


class FakeMailServer(FakeServer, Generic[F]):
    """A fake mail API: its clock (``clock`` plus the offset :meth:`advance_clock` adds),
    one lock over its state, ``request_counts`` by route, ``faults`` (of which
    ``latency_s`` is waited before every API request, in :meth:`_arrive`), and what it
    holds: the messages by mailbox, the outbox (every email sent) and the idempotency
    keys, each valid ``key_ttl_s`` (the subclass says from when)."""

    #: the stored messages of each mailbox (inbox, grant), the subclass's own type
    _messages: dict[str, list[Any]]
    #: every email sent, in send order: entries with ``to_json()``
    _outbox: list[Any]
    #: the idempotency keys' records (an ``expires_at``, None while it has no end)
    _keys: dict[Any, Any]

    def __init__(self, faults: F, clock: Clock | None, key_ttl_s: float) -> None:
        super().__init__()
        self.faults = faults
        self.key_ttl_s = key_ttl_s
        self._base_clock: Clock = clock if clock is not None else time.time
        self._clock_offset_s = 0.0
        self._lock = threading.RLock()
        self.request_counts: Counter[str] = Counter()
        self._seq = 0
        self._messages = {}
        self._outbox = []
        self._keys = {}

    @property
    def outbox(self) -> list[Any]:
        """Every email actually sent, in send order (a copy)."""
        with self._lock:
            return list(self._outbox)

    def fail_next(self, n: int, status: int = 500) -> None:
        """The next ``n`` sends answer ``status`` without sending."""
        with self._lock:
            self.faults.fail_remaining = n
            self.faults.fail_status = status

    def lose_response_next(self, n: int) -> None:
        """The next ``n`` sends that would answer 2xx do their work, then answer 500."""
        with self._lock:
            self.faults.lose_remaining = n

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self.faults.latency_s = seconds

    def _restart(self, faults: F) -> None:
        """No messages, outbox or keys, fresh faults, no counts, no clock offset (the
        subclass forgets its own state). Called with the lock held."""
        self._messages.clear()
        self._outbox.clear()
        self._keys.clear()
        self.faults = faults
        self.request_counts.clear()
        self._clock_offset_s = 0.0

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def now(self) -> float:
        return self._base_clock() + self._clock_offset_s

    def advance_clock(self, seconds: float) -> float:
        """Move the fake's time forward (or back); returns the new now()."""
        with self._lock:
            self._clock_offset_s += seconds
        return self.now()

    def _live_key(self, scope: Any) -> Any:
        """The record of an idempotency key, or None: never used, or expired (then
        forgotten). Called with the lock held."""
        record = self._keys.get(scope)
        if record is not None and record.expires_at is not None and self.now() >= record.expires_at:
            del self._keys[scope]
            return None
        return record

    async def _send_holding_key(self, scope: Any, send: Callable[[], R]) -> R:
        """Wait ``send_delay_s`` (the key is reserved, the request in flight), then call
        ``send`` with the lock held. If the wait or the send fails, or is cancelled, the
        key's record under ``scope`` (None: the request has no key) is dropped."""
        try:
            if self.faults.send_delay_s > 0:
                await asyncio.sleep(self.faults.send_delay_s)
            with self._lock:
                return send()
        except BaseException:
            if scope is not None:
                with self._lock:
                    self._keys.pop(scope, None)
            raise

    async def _answer_delay(self) -> None:
        """After a send, before its answer: wait ``answer_delay_s`` (the email is out)."""
        if self.faults.answer_delay_s > 0:
            await asyncio.sleep(self.faults.answer_delay_s)

    async def _c_outbox(self, request: web.Request) -> web.Response:
        entries = [e.to_json() for e in self.outbox]
        return web.json_response({"count": len(entries), "outbox": entries})

    def _count(self, name: str) -> None:
        with self._lock:
            self.request_counts[name] += 1

    async def _arrive(self, request: web.Request) -> tuple[str, list[str], bytes]:
        """Read the whole request, count it, wait the injected latency; return its path,
        the path's parts after the version (``v0``, ``v3``) and its body.

        The body is read first: the latency then models a server that has the request and
        is slow, and a client giving up cannot un-send it.
        """
        raw_path = request.raw_path.split("?", 1)[0]
        parts = [unquote(p) for p in raw_path.strip("/").split("/")][1:]
        raw_body = await request.read()
        with self._lock:
            self.request_counts["total"] += 1
            latency = self.faults.latency_s
        if latency > 0:
            await asyncio.sleep(latency)
        return raw_path, parts, raw_body

"""The lifecycle the fake API servers share: serve an aiohttp app on this loop or a thread."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


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

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._base_url

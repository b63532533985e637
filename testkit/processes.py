"""One supervised process for tests, chaos and benchmarks: a real program in its own
session (a Ctrl-C reaches the supervisor only), its output in a log file, stopped or
killed as a whole process group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Self

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


class ProcessError(Exception):
    """A supervised process exited or did not become ready; the message holds its output."""


@dataclass(eq=False, repr=False)
class Supervised:
    """``argv`` with ``env``, output to ``log_path``; ``append`` keeps earlier runs' output
    (with a banner per start), else each start truncates the log."""

    #: what ``wait_ready`` raises; a subclass may raise its own
    error: ClassVar[type[Exception]] = ProcessError

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    _: KW_ONLY
    append: bool
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    starts: int = field(default=0, init=False)

    def start(self) -> Self:
        self.starts += 1
        with self.log_path.open("ab" if self.append else "wb") as log:
            if self.append:
                log.write(
                    f"\n===== start #{self.starts} of {self.name} at "
                    f"{datetime.now(UTC).isoformat()} =====\n".encode()
                )
                log.flush()
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise self.error(f"{self.name} is not running")
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``. Idempotent."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:]) or "(no output)"

    async def wait_ready(self, url: str, timeout_s: float = 30.0) -> None:
        """Wait until ``GET url`` answers 200; fail with the output if it exits first."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                if not self.alive:
                    raise self.error(
                        f"{self.name} exited during start-up (exit {self.returncode}); "
                        f"its output:\n{self.log_tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise self.error(
                        f"{self.name} did not answer {url} within {timeout_s:g} s; its output:\n"
                        + self.log_tail()
                    )
                await asyncio.sleep(0.1)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The processes of a chaos run: the supervised process, and the broker."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from chaos.common import ChaosError, now
from testkit.processes import Supervised

# --------------------------------------------------------------------------- processes


class Proc(Supervised):
    """One real process in its own session, output appended to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, argv, env, log_path, append=True)

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return self.process.pid if self.process is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class BrokerProc(Proc):
    """``onceonly broker`` (the embedded KRaft broker) as a process; its JVM leads its own
    session, so a stop goes through the command, which stops the JVM cleanly."""

    def __init__(self, run_dir: Path, port: int, env: dict[str, str], log_path: Path) -> None:
        super().__init__("broker", [sys.executable, "-m", "onceonly", "broker"], env, log_path)
        self.run_dir = run_dir
        self.port = port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_and_wait(self, timeout_s: float = 120.0) -> None:
        before = self.log_text().count("kafka broker ready at")
        self.start()
        deadline = now() + timeout_s
        while self.log_text().count("kafka broker ready at") <= before:
            if not self.alive:
                raise ChaosError(f"the broker exited during start-up:\n{self.log_tail()}")
            if now() > deadline:
                raise ChaosError(f"the broker was not ready within {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 60.0) -> None:
        super().stop(timeout_s)
        self._kill_leftover_jvm()

    def kill(self) -> None:
        super().kill()
        self._kill_leftover_jvm()

    def _kill_leftover_jvm(self) -> None:
        """If the command was killed before it stopped its JVM, stop the JVM by its pid."""
        pid_path = self.run_dir / "broker" / "broker.pid"
        try:
            pid = int(pid_path.read_text(encoding="ascii").strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"kafka.Kafka" in cmdline and str(self.run_dir).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

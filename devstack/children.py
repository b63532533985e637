"""Child processes the dev stack starts (a model server, Jaeger, the worker beside ingest),
and the stop of the local stack within a time budget."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self


def stop_child(process: subprocess.Popen[Any] | None, timeout_s: float = 10.0) -> bool:
    """SIGTERM ``process`` if it still runs, SIGKILL it after ``timeout_s``; reaped either way.
    True if it had to be killed."""
    if process is None or process.poll() is not None:
        return False
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True
    return False


def seconds_left(began: float, now: float, budget_s: float, keep_s: float = 0.0) -> float:
    """What is left of a stop that began at ``began`` and must end ``budget_s`` later, once
    ``keep_s`` is kept for what stops after (never below 0: then at once)."""
    return max(0.0, began + budget_s - keep_s - now)


class Stopping:
    """The stop of the local stack, which must end within ``budget_s`` of its start.

    :meth:`begin` (at Ctrl-C, or when the stack's exit begins) notes the time and asks every
    child added with :meth:`add` to stop at once (SIGTERM), so the worker stops beside ingest
    rather than after it; each part then waits what is left of the budget (:meth:`left`)
    before it is killed. A second :meth:`begin` changes nothing.
    """

    def __init__(self, budget_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self._clock = clock
        self.began: float | None = None
        self._children: list[subprocess.Popen[Any]] = []

    def add(self, process: subprocess.Popen[Any]) -> None:
        self._children.append(process)

    def begin(self) -> None:
        if self.began is not None:
            return
        self.began = self._clock()
        for process in self._children:
            if process.poll() is None:
                process.terminate()

    def left(self, keep_s: float = 0.0) -> float:
        """Seconds left of the budget, keeping ``keep_s`` for what stops after; the whole
        budget while the stop has not begun."""
        now = self._clock()
        return seconds_left(
            self.began if self.began is not None else now, now, self.budget_s, keep_s
        )


class Running:
    """A context manager that starts on entry and stops on exit (the broker, the cluster, a
    child server)."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ChildServer(Running):
    """A server program run as a child in its own session, its output appended to ``log``;
    :meth:`start` returns once :meth:`answers` is true, or stops it and raises ``error``
    with the log's last lines. Subclasses set ``error`` and ``start_timeout_s`` and say
    when the server answers; ``name`` is what the error calls it, ``env`` is added to
    this process's environment."""

    error: type[Exception] = RuntimeError
    start_timeout_s = 60.0

    def __init__(
        self,
        name: str,
        log: Path,
        command: Sequence[str | Path],
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.command = list(command)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def answers(self) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float | None = None) -> Self:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=None if self.env is None else {**os.environ, **self.env},
            )
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
                raise self.error(f"{self.name} did not start; {self.log} ends:\n{tail}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        stop_child(self.process)
        self.process = None

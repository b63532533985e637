"""Child processes the dev stack starts (a model server, Jaeger, the worker beside ingest)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_child(process: subprocess.Popen[Any] | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``process`` if it still runs, SIGKILL it after ``timeout_s``; reaped either way."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

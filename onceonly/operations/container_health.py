"""The container health check of the onceonly image: ``python3 -m
onceonly.operations.container_health``.

One image runs every command, so the check asks the container's own command (PID 1's
command line) what to probe: ingest's ``/readyz`` (200 once its producer reached the
broker), the worker's ``/metrics`` on its web port (served once faust is up); any other
command (``topics``, ``lag``, ...) has nothing to serve and is healthy while it runs.
Only the standard library: it runs every few seconds.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_PORTS = {"ingest": 8000, "worker": 6066}
PATHS = {"ingest": "/readyz", "worker": "/metrics"}
PORT_VARIABLES = {"ingest": "ONCEONLY_INGEST_PORT", "worker": "ONCEONLY_WORKER_PORT"}


def role_of(argv: Sequence[str]) -> str | None:
    """``ingest`` or ``worker`` if the command line runs one of them, else None."""
    words = [Path(word).name for word in argv]
    if "onceonly" not in words:
        return None
    after = words[words.index("onceonly") + 1 :]
    command = next((word for word in after if not word.startswith("-")), None)
    return command if command in PATHS else None


def probe_url(role: str, env: Mapping[str, str]) -> str:
    """The URL that answers 200 when ``role`` is healthy, on loopback inside the container."""
    port = env.get(PORT_VARIABLES[role]) or str(DEFAULT_PORTS[role])
    return f"http://127.0.0.1:{port}{PATHS[role]}"


def _pid1_argv() -> list[str]:
    raw = Path("/proc/1/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def main(argv: Sequence[str]) -> int:
    """``compose_health [ingest|worker]``: exit 0 if healthy, 1 (with the reason) if not."""
    role = argv[0] if argv else role_of(_pid1_argv())
    if role is None:
        return 0
    if role not in PATHS:
        print(f"unknown role {role!r}: give ingest or worker", file=sys.stderr)
        return 2
    url = probe_url(role, os.environ)
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            status = int(answer.status)
    except (urllib.error.URLError, OSError) as exc:
        print(f"{role} unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"{role} unhealthy: {url} answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

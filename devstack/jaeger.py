"""Jaeger, a real OTLP receiver with a query API, built from its Go module for the tracing
test against software we did not write.

:func:`build` fetches ``github.com/jaegertracing/jaeger`` at :data:`VERSION` through the
Go module proxy (``go mod download``), builds ``cmd/all-in-one`` from a writable copy
(its ``go.mod`` has replace directives, which ``go install pkg@version`` refuses) under
``nice -n 19`` with one job, into ``.run/bin/jaeger-all-in-one``. :class:`Jaeger` runs it
with in-memory storage on free loopback ports: OTLP/HTTP in, ``/api/traces/<id>`` out.

``python -m devstack.jaeger build`` builds it (or says it is built).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from devstack.children import ChildServer
from devstack.ports import free_port
from onceonly.foundation.errors import OnceOnlyError

ROOT = Path(__file__).resolve().parents[1]
MODULE = "github.com/jaegertracing/jaeger"
VERSION = "v1.76.0"
BINARY = ROOT / ".run" / "bin" / "jaeger-all-in-one"


class JaegerError(OnceOnlyError):
    """Jaeger could not be built or started; the message says what to do."""


def unavailable(binary: Path = BINARY) -> str | None:
    """Why Jaeger cannot run here (for a test's skip), or None."""
    if not binary.exists():
        return f"Jaeger is not built at {binary}: `python -m devstack.jaeger build` (Go, ~20 min)"
    return None


def build(binary: Path = BINARY) -> float:
    """Build once; the seconds it took (0 when it was there)."""
    if binary.exists():
        return 0.0
    go = shutil.which("go")
    if go is None:
        raise JaegerError("no `go` on PATH: install Go 1.24 or newer to build Jaeger")
    started = time.monotonic()
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise JaegerError(f"go mod download {MODULE}@{VERSION} failed: {found.stdout[-2000:]}")
    source = Path(json.loads(found.stdout)["Dir"])
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jaeger-src-") as tmp:
        work = Path(tmp) / "jaeger"
        shutil.copytree(source, work)
        for path in work.rglob("*"):  # the module cache is read-only
            path.chmod(path.stat().st_mode | 0o200)
        env = {**os.environ, "GOFLAGS": "-buildvcs=false -p=1"}
        command = ["nice", "-n", "19", go, "build", "-o", str(binary), "./cmd/all-in-one"]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise JaegerError(f"building Jaeger failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.monotonic() - started


class Jaeger(ChildServer):
    """``jaeger-all-in-one`` with in-memory storage on free loopback ports."""

    error = JaegerError
    FLAGS = (
        "collector.otlp.http.host-port",
        "collector.otlp.grpc.host-port",
        "query.http-server.host-port",
        "query.grpc-server.host-port",
        "admin.http.host-port",
        "collector.http-server.host-port",
        "collector.grpc-server.host-port",
    )

    def __init__(self, log: Path, binary: Path = BINARY) -> None:
        self.ports = {flag: free_port() for flag in self.FLAGS}
        flags = [f"--{flag}=127.0.0.1:{port}" for flag, port in self.ports.items()]
        super().__init__("Jaeger", log, [str(binary), *flags], env={"SPAN_STORAGE_TYPE": "memory"})

    @property
    def otlp_endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT takes."""
        return f"http://127.0.0.1:{self.ports['collector.otlp.http.host-port']}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['query.http-server.host-port']}"

    def answers(self) -> bool:
        return self.get("/api/services") is not None

    def get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"{self.query_url}{path}", timeout=5) as answer:
                return json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as Jaeger's query API has it (``data[0]``), or None while it has not."""
        found = self.get(f"/api/traces/{trace_id}")
        data = (found or {}).get("data") or []
        return dict(data[0]) if data else None


if __name__ == "__main__":
    if sys.argv[1:] not in ([], ["build"]):
        raise SystemExit("usage: python -m devstack.jaeger [build]")
    seconds = build()
    print(f"built in {seconds:.0f} s: {BINARY}" if seconds else f"built already: {BINARY}")

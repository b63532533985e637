"""Ctrl-C stops `python -m devstack up` (what `make run` runs) within 10 s: its ingest, its
worker and its broker, whether the worker idled for long or does not stop at all."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from testkit import signing
from tests.integration.devstack.running_up import Up, post_sample, running_up, up_env, wait_for

pytestmark = pytest.mark.integration

#: what the issue asks of Ctrl-C, for the whole stack
WITHIN_S = 10.0
#: faust's stream-inactivity and commit-livelock timeouts (its own variables), and ours
SHORT_TIMEOUTS = {
    "STREAM_PROCESSING_TIMEOUT": "4",
    "BROKER_COMMIT_LIVELOCK_SOFT_TIMEOUT": "4",
    "ONCEONLY_STALL_WARN_S": "4",
}
#: a console line at WARNING or above, or a traceback
LOUD = re.compile(r"\[(warning|error|critical)\s*\]|Traceback")


def worker_pid(up: Up) -> int:
    [pid] = re.findall(r"worker started \(pid (\d+)\)", up.output())
    return int(pid)


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def answers(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def ctrl_c(up: Up) -> float:
    """Ctrl-C as a terminal sends it (SIGINT to the foreground group: `up` and its worker);
    the seconds until `up` exited."""
    began = time.monotonic()
    os.killpg(up.process.pid, signal.SIGINT)
    up.process.wait(60)
    return time.monotonic() - began


def stall_checks(up: Up) -> float:
    url = f"http://127.0.0.1:{up.env['ONCEONLY_WORKER_PORT']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as page:
            text = page.read().decode()
    except OSError:
        return -1.0
    match = re.search(r"^onceonly_stall_checks_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else -1.0


def test_ctrl_c_stops_a_stack_whose_worker_idled_past_every_timeout_within_10_s(
    tmp_path: Path,
) -> None:
    env = up_env(
        tmp_path,
        ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=signing.SVIX_SECRET,
        # `make run`'s reorder window (up_env's 200 ms makes the tick timer's interval 50 ms:
        # mode warns of any turn of the loop longer than that, as on a loaded machine)
        ONCEONLY_REORDER_WINDOW_MS="2000",
        **SHORT_TIMEOUTS,
    )
    with running_up(tmp_path, env) as up:
        wait_for(lambda: "worker ready" in up.output(), 120, "the worker", up.log)
        assert post_sample(up, "<idle@example.com>") == 204
        outbox = up.run_dir / "dry-run-outbox.jsonl"
        wait_for(
            lambda: outbox.exists() and outbox.read_text().endswith("\n"), 90, "the reply", up.log
        )
        rounds = stall_checks(up)

        def idle_and_quiet() -> bool:
            loud = [line for line in idle_console(up) if LOUD.search(line)]
            assert not loud, "the idle stack logged:\n" + "\n".join(loud)
            return stall_checks(up) >= rounds + 4  # 28 s: past faust's 4 s and ours

        wait_for(idle_and_quiet, 90, "four rounds of the stall check", up.log)
        worker = worker_pid(up)

        took = ctrl_c(up)

        assert up.process.returncode == 0, up.output()[-3000:]
        assert took < WITHIN_S, f"Ctrl-C took {took:.1f} s:\n{up.output()[-3000:]}"
        assert gone(worker) and not answers(env["ONCEONLY_KAFKA_BOOTSTRAP"])


def idle_console(up: Up) -> list[str]:
    """The console since the reply was sent. Before it, start-up may say once that a client
    waited for the broker (ingest's producer waits for its producer id while the broker
    loads); nothing is produced, so nothing is answered, before that wait is over."""
    return up.output().split("reply sent", 1)[-1].splitlines()


def test_ctrl_c_stops_the_stack_within_10_s_when_its_worker_does_not_stop(
    tmp_path: Path,
) -> None:
    env = up_env(tmp_path)
    with running_up(tmp_path, env) as up:
        wait_for(lambda: "worker ready" in up.output(), 120, "the worker", up.log)
        worker = worker_pid(up)
        os.kill(worker, signal.SIGSTOP)  # frozen: it never acts on a signal but SIGKILL

        took = ctrl_c(up)

        assert took < WITHIN_S, f"Ctrl-C took {took:.1f} s:\n{up.output()[-3000:]}"
        assert up.process.returncode == 0, up.output()[-3000:]
        assert gone(worker) and not answers(env["ONCEONLY_KAFKA_BOOTSTRAP"])
        assert "worker did not stop" in up.output()

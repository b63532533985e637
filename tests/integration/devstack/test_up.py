"""`python -m devstack up` (what `make run` runs): a whole local stack, from a signed POST to a
reply."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest

from testkit import signing
from tests.integration.devstack.running_up import post_sample, running_up, up_env, wait_for

pytestmark = pytest.mark.integration


def test_up_runs_broker_topics_worker_and_ingest_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = up_env(tmp_path, ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=signing.SVIX_SECRET)
    with running_up(tmp_path, env) as up:
        assert post_sample(up, "<up@example.com>") == 204

        outbox = tmp_path / "run" / "dry-run-outbox.jsonl"
        # the outbox file exists from its open() on: wait for its whole line
        wait_for(
            lambda: outbox.exists() and outbox.read_text().endswith("\n"),
            90,
            "the dry-run reply",
            up.log,
        )
        [reply] = [json.loads(line) for line in outbox.read_text().splitlines()]
        assert reply["message_id"] == "<up@example.com>"
        # the worker it started serves the operator page it printed
        ops = f"http://127.0.0.1:{up.env['ONCEONLY_WORKER_PORT']}/ops"
        assert f"operator   {ops} (worker, read-only" in up.output()
        with urllib.request.urlopen(ops, timeout=30) as page:
            assert "onceonly operator page" in page.read().decode()

        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(60) == 0
        assert "stopping kafka" in up.output()

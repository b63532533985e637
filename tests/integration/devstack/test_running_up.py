"""The tests' `devstack up` on free ports: a port taken between its pick and the stack's bind
(another test's listener) is picked again, not a failed test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devstack.ports import LOOPBACK
from tests.integration.devstack.running_up import READY, running_up, up_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("variable", ["ONCEONLY_KAFKA_BOOTSTRAP", "ONCEONLY_INGEST_PORT"])
def test_a_stack_whose_picked_port_was_taken_starts_on_another(
    tmp_path: Path, variable: str
) -> None:
    env = up_env(tmp_path)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taker:
        taker.bind((LOOPBACK, 0))
        taker.listen()
        taken = taker.getsockname()[1]
        env[variable] = f"{LOOPBACK}:{taken}" if ":" in env[variable] else str(taken)

        with running_up(tmp_path, env) as up:
            assert READY in up.output()
            assert str(taken) not in up.env[variable]
            first = (tmp_path / "up.log.1").read_text(errors="replace")
            assert "already in use" in first.lower() and str(taken) in first

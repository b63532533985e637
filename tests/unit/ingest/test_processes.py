"""The parent of ONCEONLY_INGEST_PROCESSES: its port, its restarts, its count."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from onceonly.foundation.settings import Settings, usable_cores
from onceonly.ingest.processes import mark_ready, ready_pids, reserve_port, restart_due, started


def test_the_reserved_port_can_be_bound_again_by_a_child() -> None:
    reserved = reserve_port("127.0.0.1", 0)
    child = socket.socket()
    child.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        child.bind(("127.0.0.1", reserved.getsockname()[1]))
        child.listen()
    finally:
        child.close()
        reserved.close()


def test_the_reserved_port_takes_no_connection() -> None:
    reserved = reserve_port("127.0.0.1", 0)
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", reserved.getsockname()[1]), timeout=2)
    finally:
        reserved.close()


def test_a_dead_child_is_not_restarted_within_the_interval_of_its_start() -> None:
    assert not restart_due(last_start=10.0, now=10.5, every_s=1.0)


def test_a_dead_child_is_restarted_once_the_interval_has_passed() -> None:
    assert restart_due(last_start=10.0, now=11.0, every_s=1.0)


def test_a_child_that_listens_is_counted_ready(tmp_path: Path) -> None:
    mark_ready(tmp_path)

    assert len(ready_pids(tmp_path)) == 1


def test_the_children_have_started_once_every_one_listened() -> None:
    assert started({1, 2}, dead=set(), ready={1, 2}) is True


def test_a_child_dead_after_it_listened_still_counts_as_started() -> None:
    # killed right after its ready mark: the restart loop starts it again, not a failure
    assert started({1, 2}, dead={1}, ready={1, 2}) is True


def test_a_child_dead_before_it_listened_is_a_failed_start() -> None:
    assert started({1, 2}, dead={2}, ready={1}) is False


def test_children_still_starting_are_waited_for() -> None:
    assert started({1, 2}, dead=set(), ready={1}) is None


def test_auto_is_the_usable_cores() -> None:
    assert Settings(ingest_processes="auto").ingest_processes == usable_cores()  # type: ignore[arg-type]


def test_one_process_is_the_default() -> None:
    assert Settings().ingest_processes == 1

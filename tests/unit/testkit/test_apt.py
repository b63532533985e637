"""apt-get runs of the tests and benchmarks are kept apart by a lock of their own: apt-get
update fails at once on another run's package-lists lock (a CI run failed so)."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

from testkit.apt import one_at_a_time


def _try_lock() -> bool:
    """Whether another run (another open of the lock file) would get the lock now."""
    with (Path(tempfile.gettempdir()) / "onceonly-apt.lock").open("w") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_another_run_waits_while_one_holds_the_lock() -> None:
    with one_at_a_time():
        during = _try_lock()

    assert (during, _try_lock()) == (False, True)


def test_the_lock_is_let_go_when_the_run_fails() -> None:
    with pytest.raises(RuntimeError), one_at_a_time():
        raise RuntimeError("apt-get failed")

    assert _try_lock()

"""apt-get as the tests and the benchmarks run it to install what they need: one at a time.

Tests that install a Debian package run side by side (pytest-xdist), and two apt-get runs
at once fail on each other's locks: ``apt-get install`` waits for dpkg's lock when told to
(``DPkg::Lock::Timeout``), but ``apt-get update`` does not wait for the package lists' lock
(tried on apt 2.6.1: it fails at once). A lock of our own around every run keeps ours
apart; the timeout covers another program's install.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["APT_GET", "one_at_a_time"]

#: apt-get, waiting up to 10 minutes for dpkg's lock
APT_GET = ("apt-get", "-o", "DPkg::Lock::Timeout=600")


@contextmanager
def one_at_a_time() -> Iterator[None]:
    """Held while apt-get runs: an exclusive lock on a file in the system's temp dir."""
    with (Path(tempfile.gettempdir()) / "onceonly-apt.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)

"""The simulator made cheaper plays every schedule as before: the trace (every event and its
virtual time), the verdict and the end of a few fixed seeds, with and without approvals and
with planted bugs, digest to what the simulator gave before it was made cheaper (recorded
from commit 9f9a684, issue 43 item 5)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import structlog

from testkit.sim.__main__ import quiet
from testkit.sim.run import Result, run_schedule
from testkit.sim.schedule import Bugs, Schedule


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    saved = structlog.get_config()
    quiet()
    yield
    structlog.configure(**saved)


#: (seed, planted bug, approval required) -> the digest of its result, from before
DIGESTS = [
    (3000, Bugs(), None, "065c4e3dfab510d4"),
    (3001, Bugs(), None, "e91d4f3bb52b9df1"),
    (3002, Bugs(), True, "20f1a35116e48fa3"),
    (3003, Bugs(), True, "0a3f24396c933db1"),
    (3004, Bugs(), False, "e5dc0dfbfe6c69d9"),
    (1, Bugs(no_fence_before_send=True), None, "4fcf0ee646ae7dd2"),
    (2, Bugs(ledger_after_send=True), None, "75260710f4fa1aeb"),  # a violation
    (3, Bugs(approval_applied_twice=True), True, "13e61f593fadcc27"),  # a violation
    (4, Bugs(keys_ignored=True), None, "fc5405340e0a774b"),
]


def digest(result: Result) -> str:
    found = hashlib.sha256()
    for event in result.events:
        found.update(event.encode())
        found.update(b"\n")
    end = (
        sorted(map(str, result.verdict.violations)),
        result.errors,
        result.settled,
        result.virtual_s,
        result.keys_ignored,
        sorted(result.stale_sends),
    )
    found.update(repr(end).encode())
    return found.hexdigest()[:16]


@pytest.mark.parametrize(("seed", "bugs", "approval", "expected"), DIGESTS)
def test_a_seed_plays_as_before_the_simulator_was_made_cheaper(
    seed: int, bugs: Bugs, approval: bool | None, expected: str
) -> None:
    result = run_schedule(Schedule(seed, bugs, require_approval=approval))
    assert digest(result) == expected

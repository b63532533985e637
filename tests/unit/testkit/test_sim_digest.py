"""The simulator made cheaper plays every schedule as before: the trace (every event and its
virtual time), the verdict and the end of a few fixed seeds, with and without approvals and
with planted bugs, digest to what the simulator gave before it was made cheaper (issue 43
item 5). First recorded from commit 9f9a684; recorded again from 2abeaaa, the simulator
with the operator's dead-letter retries (which draws new events in every schedule) and not
yet made cheaper: the cheaper simulator gives the same digests on both."""

from __future__ import annotations

import hashlib

import pytest

from testkit.sim.run import Result, run_schedule
from testkit.sim.schedule import Bugs, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet")


#: (seed, planted bug, approval required) -> the digest of its result, from before
DIGESTS = [
    (3000, Bugs(), None, "6ea658a777312aad"),
    (3001, Bugs(), None, "f2a5bb3f258a6cce"),
    (3002, Bugs(), True, "77c09f34290c7b25"),
    (3003, Bugs(), True, "50623442f297148e"),
    (3004, Bugs(), False, "11958f77f596a39c"),
    (1, Bugs(no_fence_before_send=True), None, "a5fbbba17dea9de2"),
    (2, Bugs(ledger_after_send=True), None, "facb6b1392d2117b"),  # a violation
    (3, Bugs(approval_applied_twice=True), True, "7d1dcf3ff09d5e10"),  # a violation
    (4, Bugs(keys_ignored=True), None, "fc0e383b15841e8d"),
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

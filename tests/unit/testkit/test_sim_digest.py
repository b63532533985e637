"""The simulator made cheaper plays every schedule as before: the trace (every event and its
virtual time), the verdict and the end of a few fixed seeds, with and without approvals and
with planted bugs, digest to what the simulator gave before it was made cheaper (issue 43
item 5). First recorded from commit 9f9a684; recorded again from 2abeaaa, the simulator
with the operator's dead-letter retries (which draws new events in every schedule) and not
yet made cheaper: the cheaper simulator gives the same digests on both. Recorded again with
F16's fix (a member asks the fence before it records how a burst's events ended, which
moves every later event's virtual time), two again with F17's (a late record after
another writer's draft asks the fence once more, and is followed by the owner's draft), and
the three with keys ignored again once those schedules drew pauses right after a pending
record's write (``schedule._after_writes``, from a generator of their own), and all but
two again with F19's fix (the owner's ledger audit every 30 virtual seconds: a run ends
after its owner's audit, and an audit's read of another writer's records draws its
latency, so later events may move), and all again with the log cleaner over the ledger
(``log.Cleaner``): eight differ only by the cleaner's own trace lines (the digest without
them is the one before), and seed 3's two decisions made at one virtual instant leave the
loop's timer heap in the other order (the cleaner's timers are in the heap too), with the
same violations; and six again with the operator's catch-ups and lost webhooks
(``testkit.sim.catchup``: in the schedules that lose webhooks, whose catch-ups feed records;
the three that lose none, 3001, 1 and 4, play exactly as before); and all again with the
ledger's compaction lag (finding F22: the cleaner removes fewer records, and its trace lines
move); and seven again with the events table and redelivered webhooks
(``testkit.sim.events``: every delivery is claimed with the product's dedupe, so an original
read again after a rebalance whose outcome landed is skipped, where the ledger decided
before; 3001 and 3004, which read none again and draw no redelivery, play as before); and
two (3003 and 3, approval on) again with the new owner's take-over read of the ledger
(finding F29): in each, two decisions made at one virtual instant leave the loop's heap in
the other order (the read's awaits are in it too), and nothing else moves; the take-over
writes nothing in any of the nine; and the three with approval on (3002, 3003, 3) again
with F32's fix (a burst delivered again reads the thread, with the mail API's latency, for
a draft marked superseded by a reply that never saw it): bursts of redelivered drafts
finish later, and nothing else moves (the same violations in seed 3); and two (3002 and
3003) again with F28's approval check (a decision approving a draft reads the thread, with
the mail API's latency, for a newer reply covering it): later events move in virtual time,
the violations (none), the settled messages and the errors are the same, and in 3002 the
run ends at the same virtual second with the same number of events; and three (3001, 3002
and 2, the ones that draw broker faults) again with the broker's failovers and expiring
writes (``testkit.sim.broker``, from a generator of their own): the six that draw none play
exactly as before; 3002 and 2 again once the expiries they draw are no longer played by
default (``Broker.expiries``, while finding F38 was open): only their failovers play; and
all nine again once each lane's first work, decision and recovered send waits for the
partition's take-over read (findings F38, F39: two reads of the broker's latency at each
assignment, before the first audit): the take-over writes nothing in any of them, every
seed ends with the same violations, errors and settled messages at the same virtual second
with the same number of events; in six the same events come in the same order (only their
virtual times move), in 3003, 1 and 3 some come in another order; and all but one (3002)
again once a lane's take-over asks the fence before its read (a round trip to the group
at each assignment) and a member's restart no longer inherits the position of the lane
that exited: every seed ends with the same violations, errors and settled messages at the
same virtual second; in 3003 a lane's bursts are grouped otherwise (16 more events); in
3001 and 4 the same events come in the same order; and the two that draw expiries (3002
and 2) again once expiries play in every schedule (and events-table writes made while
writes expire are lost), F37, F38 and F39 fixed: no violations or errors in either, every
message settled; 3002 ends at 2,090 virtual seconds instead of 2,095 with 550 events (its
members exit on expired writes and restart), 2 at the same second with one more. Since the
reorder window is simulated (``testkit.sim.holding``, drawn for half the seeds: four of
these nine draw one), these nine play at window 0, as recorded (``as_found``); two more
digests pin seeds played with the window they draw (``HELD_DIGESTS``). 3002 again with
F52's fix: its burst [m53, m54] found m54's draft covering m53, which had no record; m53
is now recorded covered before the approval path reads the thread (it was after), so later
events move and some come in another order; the same end (no violations or errors, every
message settled, 2,090 virtual seconds)."""

from __future__ import annotations

import hashlib

import pytest

from testkit.sim.run import Result, run_schedule
from testkit.sim.schedule import Bugs, Reorder, Schedule

pytestmark = pytest.mark.usefixtures("sim_quiet", "before_read_cuts")  # as their seeds were found


#: (seed, planted bug, approval required) -> the digest of its result, from before
DIGESTS = [
    (3000, Bugs(), None, "113f4400c63de1a2"),
    (3001, Bugs(), None, "515981bc1576c985"),
    (3002, Bugs(), True, "7ad845e0eefa2d87"),
    (3003, Bugs(), True, "71f49bca915d22d2"),
    (3004, Bugs(), False, "d5edd0cf1ac55035"),
    (1, Bugs(no_fence_before_send=True), None, "7bf7cfa7ddf50cbd"),
    (2, Bugs(ledger_after_send=True), None, "4ccd0046ec69a3e8"),  # none since F26's fix
    (3, Bugs(approval_applied_twice=True), True, "e16b0aed634be2e4"),  # a violation
    (4, Bugs(keys_ignored=True), None, "61b0eb5251839ff6"),
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
    seed: int, bugs: Bugs, approval: bool | None, expected: str, as_found: None
) -> None:
    result = run_schedule(Schedule(seed, bugs, require_approval=approval))
    assert digest(result) == expected


#: (seed, approval required) -> the digest of its result with the reorder window it draws
#: (``Reorder.mode`` on): 3008's is 15 s, 3003's 2 s with approval; first recorded with the
#: window's simulation (testkit.sim.holding), F40 fixed: both pass; again with the
#: operator's replays (testkit.sim.replay: 3008 draws two, 603 events, not 470), the dead
#: letters failing while writes expire (F41) and each held event an entry of its own (F42:
#: a settle deletes the entries and writes the watermark, so later events move; 3003 has
#: 680 events, not 658); every message of both answered once
HELD_DIGESTS = [
    (3008, None, "6566976cc303f450"),
    (3003, True, "ba50c96981682df8"),
]


@pytest.mark.parametrize(("seed", "approval", "expected"), HELD_DIGESTS)
def test_a_seed_with_a_reorder_window_plays_as_when_recorded(
    seed: int,
    approval: bool | None,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    before_cuts: None,
) -> None:
    monkeypatch.setattr(Reorder, "mode", "on")
    result = run_schedule(Schedule(seed, require_approval=approval))
    assert digest(result) == expected

"""Cold takeover: a worker with an empty data directory takes the partitions of a killed one.

Real broker, real worker processes. The new owner rebuilds the partitions' tables from
their changelogs (or, with a standby, from its warm copy) before it answers anything.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from onceonly.schemas.ledger import EventEntry, EventState
from tests.conftest import consume_all
from tests.integration.workers import Stack, WorkerProcess
from tests.integration.workers import until as _until

pytestmark = pytest.mark.integration

#: a SIGKILLed static member holds its partitions for a session timeout (10 s), then a
#: rebalance and the recovery follow: generous under a loaded machine
TAKEOVER_S = 120
STANDBYS = re.compile(r"standby_partitions=(\d+)")


def _lines(worker: WorkerProcess, *needles: str) -> list[str]:
    return [line for line in worker.log().splitlines() if all(n in line for n in needles)]


def _succeeded(stack: Stack, key: bytes) -> bool:
    """Whether the events changelog's last record of ``key`` says succeeded (faust sends
    table writes after the store's, so a kill right after the reply may precede it)."""
    changelog = f"{stack.settings.app_id}-events-changelog"
    records = consume_all(stack.settings, changelog)
    values = [r.value() for r in records if r.key() == key]
    if not values or values[-1] is None:
        return False
    return EventEntry.from_json(json.loads(values[-1])).state is EventState.SUCCEEDED


def _standbys(worker: WorkerProcess) -> int:
    """The standby partitions of the worker's last recovery (0 before any)."""
    found = [STANDBYS.search(line) for line in _lines(worker, "tables recovered")]
    counts = [int(match.group(1)) for match in found if match is not None]
    return counts[-1] if counts else 0


async def _answered_then_taken_over(
    stack: Stack, owner: WorkerProcess, heir: WorkerProcess, answered: dict[str, Any]
) -> None:
    """``owner`` has answered ``answered`` (evt-t1); once its dedupe entry says succeeded
    in the changelog, kill it; its duplicate and evt-t2 go to ``heir``."""
    await _until(stack, lambda: _succeeded(stack, b"agentmail:evt-t1"), "the succeeded entry")
    owner.kill()
    await stack.deliver(answered)
    await stack.deliver(stack.seed("<t2@example.com>", "thr-t", event_id="evt-t2"))
    await stack.until_sent(2, timeout_s=TAKEOVER_S)
    await _until(
        stack,
        lambda: bool(_lines(heir, "delivery skipped", "evt-t1", "duplicate")),
        "the duplicate skipped by dedupe",
    )
    await asyncio.sleep(2)  # room for a wrong second reply


@pytest.mark.parametrize(
    ("min_records", "bulk"),
    # faust's replay alone; every partition with a record loaded in bulk first
    [("0", False), ("1", True)],
    ids=["faust-replay", "bulk-load"],
)
async def test_an_empty_worker_takes_over_from_a_killed_one_with_the_dedupe_state(
    stack_factory: Callable[..., Stack], min_records: str, bulk: bool
) -> None:
    stack = stack_factory(partitions=4, reorder_window_ms=0)
    first = stack.worker("w1")
    answered = stack.seed("<t1@example.com>", "thr-t", event_id="evt-t1")
    await stack.deliver(answered)
    await stack.until_sent(1)
    # its own, empty data directory
    heir = stack.worker("w2", ONCEONLY_RESTORE_BULK_MIN_RECORDS=min_records)

    await _answered_then_taken_over(stack, first, heir, answered)

    replied = [e.replied_to_message_id for e in stack.mail.outbox]
    assert replied == ["<t1@example.com>", "<t2@example.com>"]
    # skipped by the recovered dedupe entry, not only by the ledger further on
    assert _lines(heir, "reply skipped", "<t1@example.com>") == []
    assert _lines(heir, "tables recovered")
    assert bool(_lines(heir, "bulk restore of", "-events-changelog")) is bulk


async def test_a_standby_takes_over_from_a_killed_worker_with_the_dedupe_state(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(partitions=2, reorder_window_ms=0)
    workers = [stack.worker(name, ONCEONLY_STANDBY_REPLICAS="1") for name in ("w1", "w2")]
    await _until(
        stack,
        lambda: all(_standbys(w) > 0 for w in workers),
        "both workers holding a standby of the other's partition",
    )
    answered = stack.seed("<t1@example.com>", "thr-t", event_id="evt-t1")
    await stack.deliver(answered)
    await stack.until_sent(1)
    # the worker logs "reply sent" after the ledger has the sent record, which follows
    # the email itself: the outbox can hold it before either log says so
    await _until(
        stack,
        lambda: any(_lines(w, "reply sent", "<t1@example.com>") for w in workers),
        "the sender's log line",
    )
    owner = next(w for w in workers if _lines(w, "reply sent", "<t1@example.com>"))
    heir = next(w for w in workers if w is not owner)

    await _answered_then_taken_over(stack, owner, heir, answered)

    replied = [e.replied_to_message_id for e in stack.mail.outbox]
    assert replied == ["<t1@example.com>", "<t2@example.com>"]
    assert _lines(heir, "reply skipped", "<t1@example.com>") == []

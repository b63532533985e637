"""Catch-up with the operator index built: ``onceonly index --follow`` runs beside the
worker, and ``onceonly catch-up`` compares each listed message with the index by its reply
key and starts where the index says, instead of reading the whole ledger.

Real broker, a real worker, both commands as processes, the AgentMail fake as the API."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from onceonly.foundation.kafka import Connection
from onceonly.operations.index import IndexStore, freshness
from tests.integration.operations.test_catch_up_outage import delivered, lost, replied_to
from tests.integration.operations.test_index import _follower, _run
from tests.integration.workers import INBOX, Stack, until

pytestmark = pytest.mark.integration


def _ledger_indexed(stack: Stack, index_dir: Path) -> bool:
    """The index has read every record of the ledger topic."""
    if not (index_dir / "CURRENT").exists():
        return False
    store = IndexStore.reader(index_dir)
    try:
        behind = freshness(Connection.from_settings(stack.settings), stack.settings, store)
    finally:
        store.close()
    return behind.error is None and behind.by_topic.get(stack.settings.ledger_topic) == 0


async def test_catch_up_from_the_index_skips_the_answered_and_feeds_what_the_outage_lost(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker()
    index_dir = stack.tmp / "index"
    follower = _follower(stack, index_dir, stack.tmp / "index.log")
    try:
        await delivered(stack, "<before@example.com>", "thr-i1", hours_ago=10 * 24)
        await stack.until_sent(1)
        lost(stack, "<lost1@example.com>", "thr-i2", hours_ago=9 * 24)  # webhooks down...
        lost(stack, "<lost2@example.com>", "thr-i3", hours_ago=30)
        await delivered(stack, "<after@example.com>", "thr-i4", hours_ago=0.1)  # ...and back
        await stack.until_sent(2)
        await until(stack, lambda: _ledger_indexed(stack, index_dir), "the index's ledger")

        done = await asyncio.to_thread(
            _run, stack, index_dir, "catch-up", "--inbox", INBOX, "--wait-s", "60"
        )
    finally:
        follower.terminate()
        follower.wait(timeout=30)

    assert done.returncode == 0, done.stderr + done.stdout
    assert replied_to(stack) == [
        "<after@example.com>",
        "<before@example.com>",
        "<lost1@example.com>",
        "<lost2@example.com>",
    ]
    # the start came from the index's inbox entries: the answered message 10 days back
    assert "last message the ledger recorded before 7 days back" in done.stdout
    # the lost two fed and answered; the one since skipped as answered, and the start's own
    # message too when the listing includes its start (its time to the microsecond)
    assert "answered 2," in done.stdout, done.stdout
    assert re.search(r"skipped \d+ \(2 sent by the agent, [12] already answered\)", done.stdout)
    # every answered message was skipped by a lookup in the index: it had read the whole
    # ledger, and no ledger record was written between that and the catch-up's read
    assert (
        f"the ledger: answered from the index at {index_dir} and the 0 record(s) of "
        f"{stack.settings.ledger_topic} it had not read yet (read from the topic): as the "
        "topic is now"
    ) in done.stdout, done.stdout
    await asyncio.sleep(2)
    assert len(stack.mail.outbox) == 4  # each once

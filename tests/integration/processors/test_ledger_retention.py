"""The reply ledger's retention on the real broker: a settled reply's record stays, and a
redelivery of its message is skipped, inside the horizon; past it the record is
tombstoned from the ledger topic, and the message brought again is still not answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from onceonly.processors.reply.retention import CLOCK_SLACK
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.conftest import consume_all
from tests.integration.workers import INBOX, Stack, state_of, until

pytestmark = pytest.mark.integration

#: a tiny horizon, with the floors it must not be below set beneath it
HORIZON_S = 60
TINY = {
    "ONCEONLY_LEDGER_RETENTION": str(HORIZON_S),
    "ONCEONLY_DEDUPE_RETENTION": "30",
    "ONCEONLY_CATCHUP_LOOKBACK": "PT30S",
}
#: the later worker's clock: past the horizon and its slack
LATER_S = HORIZON_S + CLOCK_SLACK.total_seconds() + 120


def _at(offset_s: float = 0.0) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=offset_s)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _last_word(stack: Stack, key: str) -> bytes | None:
    """The value of the ledger topic's last record of ``key`` (None: a tombstone)."""
    records = consume_all(stack.settings, stack.settings.ledger_topic)
    values = [r.value() for r in records if r.key() == key.encode()]
    assert values, f"the ledger topic has no record of {key}"
    return values[-1]


async def test_inside_the_horizon_a_redelivery_is_skipped_past_it_the_record_is_tombstoned(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    first = stack.worker(**TINY)
    old = stack.seed("<old@example.com>", "thr-ret", event_id="evt-old", timestamp=_at())
    key = reply_key(INBOX, "<old@example.com>")
    await stack.deliver(old)
    await stack.until_sent(1)
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "the sent record")

    # inside the horizon: the same message under another event id (as a catch-up's or a
    # provider's second event would be) passes dedupe and is stopped by the ledger
    again = dict(old, event_id="evt-old-again")
    await stack.deliver(again)
    await until(stack, lambda: "reply skipped: already handled" in first.log(), "ledger skip")
    assert len(stack.mail.outbox) == 1
    first.stop()

    # past the horizon (the next worker's clock is ahead): two records on the thread's
    # partition, a sweep interval apart, run the ledger sweep
    later = stack.worker("w-later", state_of="w1", ONCEONLY_CLOCK_OFFSET_S=str(LATER_S), **TINY)
    for n in (1, 2):
        new = stack.seed(f"<new{n}@example.com>", "thr-ret", timestamp=_at(LATER_S))
        await stack.deliver(new)
        await stack.until_sent(1 + n)
        await asyncio.sleep(1.5)
    await until(stack, lambda: "ledger record removed" in later.log(), "the ledger sweep")

    assert _last_word(stack, key) is None  # tombstoned from the ledger topic
    for n in (1, 2):  # the new replies' records stay
        assert _last_word(stack, reply_key(INBOX, f"<new{n}@example.com>")) is not None

    # the message brought again past the horizon finds no record, and is still not answered
    await stack.deliver(dict(old, event_id="evt-old-late"))
    await until(stack, lambda: "older than the ledger's retention" in later.log(), "the skip")
    assert [e.replied_to_message_id for e in stack.mail.outbox].count("<old@example.com>") == 1
    assert len(stack.mail.outbox) == 3

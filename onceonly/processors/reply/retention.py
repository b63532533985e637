"""Retention of the reply ledger: a settled reply's record goes once no path can bring its
message again (docs/guarantees.md, "State that stops growing").

Two rules, one horizon (``ONCEONLY_LEDGER_RETENTION``):

* :func:`settled_expired`: the sweep tombstones a *sent*, *covered*, *declined* or
  *failed* record whose latest time (written, its message's, a person's decision) is more
  than the horizon and :data:`CLOCK_SLACK` old; never a *pending* or *awaiting* one.
* :func:`past_retention`: the worker answers no message whose own time is more than the
  horizon old (skipped, logged, a decision record).

Together: a record is removed only when its message is older than the horizon, and a
message that old is never answered again, whatever brings it (a provider's manual resend,
an operator's replay or dead-letter retry, a catch-up with an old ``--since``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from onceonly.processors.exceptions import Rebalancing
from onceonly.processors.records import SweepPasses, Table, own_slice
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.retention")

#: the states no path changes again except a new delivery of the message (which the
#: horizon stops): *failed* is closed too, since its dead letter's retry is a delivery
SETTLED = frozenset({ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED, ReplyState.FAILED})
#: the reason of the skip of a message older than the horizon (metrics, decisions)
PAST_RETENTION = "past_retention"
#: a record is kept this much past the horizon: a delivery that passed the message-age
#: check just before the horizon may still be writing its key (a lane's work takes
#: minutes at most: writer calls, send retries), and a provider's clock may run ahead
CLOCK_SLACK = timedelta(hours=1)


def settled_at(record: ReplyRecord) -> datetime:
    """The latest time a record names: written, its message's, a person's decision. Never
    earlier than its message's own time, which is what :func:`past_retention` checks."""
    times = [record.created_at, record.message_at or record.created_at]
    if record.approval is not None:
        times.append(record.approval.at)
    return max(_utc(t) for t in times)


def settled_expired(record: ReplyRecord, now: datetime, horizon: timedelta) -> bool:
    """True when the sweep may tombstone ``record`` (pure)."""
    if record.state not in SETTLED:
        return False
    return settled_at(record) < _utc(now) - horizon - CLOCK_SLACK


def past_retention(message_at: datetime, now: datetime, horizon: timedelta) -> bool:
    """True when a message this old must not be answered: its reply's record may be gone."""
    return _utc(message_at) < _utc(now) - horizon


def expired_keys(
    entries: Iterable[tuple[bytes, bytes]], now: datetime, horizon: timedelta
) -> list[tuple[bytes, ReplyRecord]]:
    """The entries of a ledger store to tombstone (an effect's record, or any other that
    does not decode as a reply, is never touched)."""
    out: list[tuple[bytes, ReplyRecord]] = []
    for key, raw in entries:
        try:
            record = ReplyRecord.decode(raw)
        except (SchemaError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if settled_expired(record, now, horizon):
            out.append((key, record))
    return out


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass
class LedgerSweeper:
    """Tombstones each owned ledger partition's expired settled records, a slice per
    record the partition receives (as the dedupe sweep does), through the ledger (topic
    first, fenced), so a store of millions of records never blocks the loop for long."""

    table: Table  #: the ``replies`` table, whose changelog is the ledger topic
    #: writes the keys' tombstones on the partition (fenced; see TableLedger.remove)
    remove: Callable[[Sequence[bytes], int], Awaitable[Any]]
    horizon: timedelta
    clock: Callable[[], float]
    on_removed: Callable[[int], None] = lambda _: None  #: the metric: records tombstoned
    every_s: float = 600.0
    #: records read per delivery the partition receives: 500 decode in ~7.5 ms (2,000
    #: of 1 KB each took 30.1 ms on the shared machine), added to that delivery's routing
    slice: int = 500
    _passes: SweepPasses = field(default_factory=SweepPasses)

    async def maybe_sweep(self, partition: int) -> None:
        due, after = self._passes.next_slice(partition, self.clock(), self.every_s)
        if not due:
            return
        try:
            last = await self.sweep(partition, after=after)
        except Rebalancing:  # moved (Fenced) or not checked (stopping): its owner sweeps it
            log.info(
                "ledger sweep stopped: the partition is no longer ours, or its ownership could "
                "not be checked",
                partition=partition,
            )
            return
        self._passes.slice_read(partition, last)

    async def sweep(self, partition: int, after: bytes | None = None) -> bytes | None:
        """Tombstone one slice's expired settled records; the last key read, to go on
        from, or None once the partition is done."""
        entries = own_slice(self.table, partition, after, self.slice)
        now = datetime.fromtimestamp(self.clock(), tz=UTC)
        expired = expired_keys(entries, now, self.horizon)
        await self.remove([key for key, _ in expired], partition)
        self.on_removed(len(expired))
        for _, record in expired:
            log.info(
                "ledger record removed: settled and past the retention",
                key=record.key,
                state=record.state.value,
                message_id=record.message_id,
                thread_key=record.thread_key,
                settled_at=settled_at(record).isoformat(),
                partition=partition,
            )
        return entries[-1][0] if len(entries) >= self.slice else None

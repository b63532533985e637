"""The reply ledger over the worker's ``replies`` table."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from onceonly.processors.exceptions import Fenced
from onceonly.processors.records import Table
from onceonly.processors.reply import arbitration as rules
from onceonly.processors.reply.take_over import Tail, TakeOvers
from onceonly.schemas.ledger import ReplyRecord, ReplyState

log = structlog.get_logger("onceonly.reply")

#: own *pending* records kept for arbitration, the oldest dropped first (their lanes moved)
PENDING_KEPT = 100_000

#: the own records a worker past its fence check (paused, woken after its partition moved)
#: may land after the next owner settled the key: *pending* (F1), *failed* (F7), *covered*
#: (its burst's older message, after the next owner sent that message's reply; F10) and
#: *awaiting* (its draft, after the next owner sent or superseded the key's; F12)
_MAY_LAND_LATE = frozenset(
    {ReplyState.PENDING, ReplyState.FAILED, ReplyState.COVERED, ReplyState.AWAITING}
)

#: times a late record's owner draft is written again while the owner writes the key
_REPEATS = 5
#: the least step between two of this ledger's stamps
_TICK = timedelta(microseconds=1)

#: a record of the ledger topic as read: offset, key, value (None: a tombstone)
Row = tuple[int, bytes, bytes | None]
#: reads the ledger topic's records: partition, first, last (included)
ReadLog = Callable[[int, int, int], Awaitable[Sequence[Row]]]


class TableLedger:
    """The reply ledger over the ``replies`` table, whose changelog *is* the ledger topic.

    ``put`` writes the topic first and the worker's own store only once the broker has
    acknowledged the record. faust's table writes go the other way (store, then changelog,
    sent later): a SIGKILL in between left the store saying *sent* while the topic said
    *pending* for good (46 of 8,000 keys after four kills in a scratch run). In this order a
    crash only leaves the store behind the topic: the next owner sends again with the same
    key, which the mail API answers from its idempotency record.
    """

    def __init__(
        self,
        table: Table,
        fence: Callable[[str], Awaitable[Any]] | None = None,
        read_log: ReadLog | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        tail: Tail | None = None,
    ) -> None:
        self.table = table
        #: stamps each record's ``written_at`` (arbitration.late_last_words reads it)
        self.clock = clock
        self._stamped = datetime.min.replace(tzinfo=UTC)
        #: awaited before each write: raises Fenced once the record's partition is not ours
        self.fence = fence
        #: reads the ledger topic where another writer's records may be (arbitration)
        self.read_log = read_log
        #: each partition's take-over, once per assignment: before a lane acts on what was
        #: recovered of it (a burst, a decision, a recovered send), or by the timer's audit
        self.take_overs = TakeOvers(tail if read_log is not None else None, self.take_over)
        #: each take-over's rows, by partition (``late_sends.LateSends.taken``)
        self.on_taken: Callable[[int, Sequence[Row]], None] = lambda partition, rows: None
        self._logs: dict[int, rules.PartitionLog] = {}
        #: partitions whose log takes in what a recovery read, at their next write
        self._moved: set[int] = set()
        #: own writes under way by partition (no recovery's end read meanwhile) and by key
        self._writing: dict[int, int] = {}
        self._inflight: dict[str, int] = {}
        #: where each key's own *pending* record landed (partition, offset), until settled
        self._pending: dict[str, tuple[int, int]] = {}
        #: the offset of each key's last own record, the latest PENDING_KEPT keys
        self._own_at: dict[str, int] = {}
        #: per partition, the last offset its store's last recovery read
        self._recovered_to: dict[int, int] = {}

    def get(self, key: str) -> ReplyRecord | None:
        return None if (raw := self.table.get(key.encode())) is None else ReplyRecord.decode(raw)

    async def put(self, record: ReplyRecord) -> None:
        made = self._made(record)
        try:
            where = await self._write(record.key, made)
        except Fenced:
            if record.state is ReplyState.SENT:
                await self._write_sent_anyway(record, made)
            raise
        self._pending.pop(record.key, None)
        if record.state is ReplyState.PENDING:
            self._pending[record.key] = where
            while len(self._pending) > PENDING_KEPT:  # left by lanes whose partition moved
                del self._pending[next(iter(self._pending))]
        if record.state in _MAY_LAND_LATE:
            await self._keep_settled(ReplyRecord.decode(made), where)  # as it was made

    async def _write_sent_anyway(self, record: ReplyRecord, made: bytes) -> None:
        """An email went out with ``record.key`` (this worker's send, past its check) and
        the fence refused its *sent* record (the partition moved): it is written all the
        same, unfenced: it says what happened, not who owns the key; without it the last
        word may be the next owner's *failed* for an email the customer has (F8). ``made``:
        as made before the fence check (a repeat keeps its stamp)."""
        await self._write(record.key, made, fenced=False)
        why = "ledger: sent record written after the partition moved (the email went out)"
        log.warning(why, key=record.key, sent=record.sent_message_id)

    async def _keep_settled(self, record: ReplyRecord, where: tuple[int, int]) -> None:
        """Another writer's record that settled the key (sent, covered, declined) before
        ``record`` landed is written again, after it, without the fence: a worker past its
        fence check (paused, woken after its partition moved) landed ``record`` after the
        key was settled, and its next write is fenced; left so, the compacted ledger's last
        word would be *pending*, which a later owner sends again. Repeating the settled
        record is right whenever it lands: nothing follows it but itself."""
        verdict = await self._ruling_at(record, where)
        if verdict.ruling not in (rules.Ruling.SENT, rules.Ruling.SETTLED):
            if record.state is not ReplyState.PENDING:
                await self._keep_draft(record, where)
            return
        settled = verdict.record
        await self._write(record.key, settled.encode(), fenced=False)
        log.warning(
            "ledger: own record landed after another writer settled the key; "
            "their record written again after it",
            key=record.key,
            state=settled.state.value,
        )

    async def _keep_draft(self, record: ReplyRecord, where: tuple[int, int]) -> None:
        """Another writer's draft (*awaiting*), or its draft approved (*pending* with an
        approval), came before ``record`` (*failed*, *covered* or *awaiting*) and nothing
        settled the key: if the fence now refuses, this worker is the late one (past its
        check, paused, woken after the partition moved) and the draft is the owner's. Left
        so, the ledger's last word is this worker's record: the draft leaves the approvals
        list and its messages are covered by a reply with no email (F17), or a stale draft
        stands over the approved one and is approved too (F31). Theirs is written
        again after it, unfenced, then whatever the owner wrote of the key meanwhile, until
        nothing of theirs lands between; then Fenced (the lane stands down: no dead letter
        for the owner's work). Still ours: the other was the late one; ``record`` stands."""
        partition, offset = where
        last = self._others(record.key, partition, -1, offset)[-1:]
        if not last or not rules.waits_on_person_or_send(last[0]) or self.fence is None:
            return
        try:
            await self.fence("a late record's partition")
        except Fenced:
            pass
        else:
            return
        latest = last[0]
        for _ in range(_REPEATS):
            landed = await self._write(record.key, latest.encode(), fenced=False)
            log.warning(
                "ledger: own record landed after the owner's draft; the draft written again",
                key=record.key,
                state=latest.state.value,
                landed=landed[1],
            )
            await self._read_gaps(partition, landed[1], record.key)
            newer = self._others(record.key, partition, offset, landed[1])
            if not newer:
                break
            offset, latest = landed[1], newer[-1]
        raise Fenced(f"ledger partition {partition} moved before {record.key}'s record landed")

    def _others(self, key: str, partition: int, after: int, before: int) -> list[ReplyRecord]:
        """Another writer's records of ``key`` read so far, in log order, between the two."""
        partition_log = self._logs.get(partition)
        found = partition_log.others(key) if partition_log is not None else []
        return [other for at, other in found if after < at < before]

    def forget(self) -> None:
        """The partitions changed. Each partition's log is kept, and takes in what the
        rebalance's recovery read at the partition's next write; each is taken over again."""
        self._moved.update(self._logs)
        self.take_overs.forget()

    async def arbitrate(self, record: ReplyRecord) -> rules.Verdict:
        """``record`` (*pending*, about to be sent) against another writer's records of its
        key that landed before it (:mod:`~onceonly.processors.reply.arbitration`)."""
        where = self._pending.get(record.key)
        if where is None:  # recovered, not written here: maybe a late one (F38)
            await self.taken_over(record.key)
            return rules.recovered_word(record, self.get(record.key))
        return await self._ruling_at(record, where)

    async def taken_over(self, key: str) -> None:
        """``key``'s partition taken over since it was assigned (``take_overs``), before its
        recovered record is acted on: a lane's first work, a send, a decision (F38, F39)."""
        await self.take_overs.once(self.table.partition_of(key.encode()))

    async def _ruling_at(self, record: ReplyRecord, where: tuple[int, int]) -> rules.Verdict:
        """``record``, landed at ``where`` (partition, offset), against another writer's
        records of its key that landed before it."""
        if self.read_log is None:
            return rules.Verdict(rules.Ruling.OWN, record)
        partition, offset = where
        partition_log = self._logs.get(partition)
        if partition_log is None:
            return rules.Verdict(rules.Ruling.OWN, record)
        await self._read_gaps(partition, offset, record.key)
        return rules.arbitrate(record, offset, partition_log.others(record.key), self.get)

    async def _read_gaps(self, partition: int, before: int, key: str) -> None:
        """Reads what another writer landed in ``partition`` below ``before`` that this
        worker has not accounted for."""
        partition_log = self._logs.get(partition)
        if partition_log is None or self.read_log is None:
            return
        for first, last in partition_log.gaps(before):
            raw = await self.read_log(partition, first, last)
            learned = partition_log.learn(
                ((o, k.decode(), rules.decoded(v)) for o, k, v in raw), first, last
            )
            log.warning(
                "ledger: another writer's records read",
                partition=partition,
                first=first,
                last=last,
                key=key,
            )
            await self._settle_again(partition, learned)

    async def _settle_again(
        self, partition: int, learned: Sequence[tuple[int, str, ReplyRecord]]
    ) -> None:
        """Another writer's records just read (in log order): this worker's record of a
        key that landed before them (``_own_before``) and still stands over them
        (:func:`~onceonly.processors.reply.arbitration.stands_over`) is written again after
        them, unfenced, as the late writer does itself (``_keep_settled``, ``_keep_draft``)
        unless stopped between its two writes; left so, the key's last word is a late
        record (*pending*: sent again by a later owner; F19) until the next take-over."""
        by_key: dict[str, list[tuple[int, ReplyRecord]]] = {}
        for offset, key, record in learned:
            by_key.setdefault(key, []).append((offset, record))
        for key, records in by_key.items():
            found = self._own_before(key, partition, records[-1][0])
            if found is None or not rules.stands_over(
                found[1], [r for o, r in records if o > found[0]]
            ):
                continue
            if self._inflight.get(key):
                continue  # a lane's newer record of the key is landing: it is the last word
            await self._write_again(
                found[1],
                partition,
                "ledger: another writer's late record of a key; "
                "this worker's record written again after it",
                late=records[-1][1].state.value,
            )

    def _own_before(self, key: str, partition: int, offset: int) -> tuple[int, ReplyRecord] | None:
        """This worker's record of ``key`` and where it landed (its own write's offset, or
        its store's last recovery's end), if before ``offset``: never a late record of its
        own (a zombie's *covered* after the owner's draft: that is ``_keep_draft``'s)."""
        own = self.get(key)
        if own is None:
            return None
        at = self._own_at.get(key, self._recovered_to.get(partition, offset))
        return (at, own) if at < offset else None

    async def audit(self, partition: int, end: int) -> bool:
        """Read what other writers landed in ``partition`` (one this worker owns) below
        ``end``, its log-end offset, that this worker has not accounted for, and settle
        again each key a late record left unsettled (``_settle_again``), on the worker's
        timer (onceonly.processors.runtime.lifecycle). Nothing is read when every offset is
        accounted for; nothing is done while an own write is under way (its offset, not yet
        accounted for, would be read as another writer's): False, and the next audit."""
        if self.read_log is None or self._writing.get(partition):
            return False
        self._account_store(partition)
        await self._read_gaps(partition, end, "")
        return True

    async def take_over(
        self, partition: int, first: int, end: int, read: ReadLog | None = None
    ) -> None:
        """Read ``partition`` (one this worker has just been given) from ``first`` to its
        log-end offset ``end``, and write again the record before each key's last one there
        when that is late (:func:`~onceonly.processors.reply.arbitration.late_last_words`),
        unless this worker writes or wrote the key since (its record is the last word). With
        the late writer (``_keep_settled``, ``_keep_draft``) and the owner (``_settle_again``)
        stopped first, the next owner recovered the late record (the simulator's finding
        F29) and sent it before this (F38; ``take_overs``). ``read``: if not arbitration's."""
        read = read or self.read_log
        if read is not None and end <= first:  # none landed within the lag: the store may
            self.on_taken(partition, [])  # still hold failures older than it (late_sends)
        if read is None or end <= first:
            return
        if self.fence is not None:  # a lane's (the audit's has no record: it is not fenced)
            await self.fence("a take-over's read")  # Fenced: the partition moved meanwhile
        rows = await read(partition, first, end - 1)
        self.on_taken(partition, rows)
        for key, again in rules.late_last_words(rows):
            if self._inflight.get(key) or self._own_at.get(key, -1) >= end:
                continue  # written here since: the late record is not the last word
            await self._write_again(
                again,
                partition,
                "ledger: a late record was the key's last word when this worker took the "
                "partition over; the record before it written again after it",
            )

    async def _write_again(self, record: ReplyRecord, partition: int, why: str, **ids: str) -> None:
        """``record`` written again after a late one, unfenced, as it was (``written_at``
        too: a repeat is not a record made anew)."""
        landed = await self._write(record.key, record.encode(), fenced=False, partition=partition)
        log.warning(why, key=record.key, state=record.state.value, landed=landed[1], **ids)

    async def put_found(self, record: ReplyRecord, partition: int) -> None:
        """``record`` *sent* as its thread shows it, outside any record (``late_sends``)."""
        await self._write(record.key, self._made(record), fenced=False, partition=partition)

    def get_raw(self, key: str) -> bytes | None:
        return None if (raw := self.table.get(key.encode())) is None else bytes(raw)

    async def put_raw(self, key: str, value: bytes) -> None:
        await self._write(key, value)

    async def remove(self, keys: Sequence[bytes], partition: int) -> None:
        """Tombstone ``keys`` in ``partition`` (the retention sweep's: settled records past
        the horizon, onceonly.processors.reply.retention), topic first, behind one fence
        check for the slice, each accounted for like an own write so arbitration never
        reads it as another writer's. A tombstone landing after the partition moved
        removes only what no path writes again (a message that old is never answered)."""
        if not keys:
            return
        if self.fence is not None:
            await self.fence("a ledger tombstone")
        self._account_store(partition)
        self._writing[partition] = self._writing.get(partition, 0) + 1
        try:
            landed = await asyncio.gather(
                *(self.table.delete_through(key, partition) for key in keys)
            )
        finally:
            self._writing[partition] -= 1
        for where in landed:
            partition_log = self._logs.get(where[0])
            if partition_log is not None:
                partition_log.wrote(where[1])
        for key in keys:
            self._pending.pop(key.decode(errors="replace"), None)
            self._own_at.pop(key.decode(errors="replace"), None)

    def _made(self, record: ReplyRecord) -> bytes:
        """``record`` as made now, before the fence check (a writer paused past its check
        lands a record made before the rebalance); each stamp after this ledger's last
        (a clock stepped back does not reorder one worker's records)."""
        now = max(self.clock(), self._stamped + _TICK)
        self._stamped = now
        return replace(record, written_at=now).encode()

    async def _write(
        self, key: str, value: bytes, fenced: bool = True, partition: int | None = None
    ) -> tuple[int, int]:
        """``partition``: given by a write outside any record (the audit's)."""
        raw = key.encode()
        if fenced and self.fence is not None:
            await self.fence("a ledger record")
        at = self.table.partition_of(raw) if partition is None else partition
        self._account_store(at)
        self._writing[at] = self._writing.get(at, 0) + 1
        self._inflight[key] = self._inflight.get(key, 0) + 1
        try:
            where = await self.table.write_through(raw, value, partition)
        finally:
            self._writing[at] -= 1
            if (left := self._inflight.pop(key) - 1) > 0:
                self._inflight[key] = left
        landed = self._logs.get(where[0])
        if landed is not None:
            landed.wrote(where[1])
        self._own_at.pop(key, None)
        self._own_at[key] = where[1]
        if len(self._own_at) > PENDING_KEPT:
            del self._own_at[next(iter(self._own_at))]
        return where

    def _account_store(self, partition: int) -> None:
        """Before a write: what the store holds is accounted for. The first time, all of
        it; after a rebalance, what its recovery read after the offsets accounted for (not
        while an own write is under way: its ack moves the offset before the log learns)."""
        partition_log = self._logs.get(partition)
        if partition_log is None:
            applied = self._recovered_to[partition] = self.table.applied_offset(partition)
            self._logs[partition] = rules.PartitionLog(applied + 1)
        elif partition in self._moved and not self._writing.get(partition):
            self._moved.discard(partition)
            applied = self._recovered_to[partition] = self.table.applied_offset(partition)
            partition_log.recovered(applied)

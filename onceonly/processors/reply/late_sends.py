"""Replies recorded *failed* after sends whose outcome is unknown, read again later.

A send that timed out may still take effect: a request written to a connection before a
network partition between the worker and the mail API stays in the kernel's send queue
when the client gives up, and TCP delivers it once the partition heals (within its
retransmission limit, about 15 minutes on Linux). The worker has by then retried with the
key, found no email in the thread, recorded the reply *failed* and dead-lettered it: the
customer has the one email and the ledger says *failed* (the simulator's ``cut_mail``,
docs/guarantees.md).

So each reply recorded *failed* after a retryable failure (a timeout, a 5xx, a 429) is
kept for ``ONCEONLY_LATE_SEND_CHECK_S``, then its thread is read: an email found there is
recorded *sent* (the dead letter stays open; its retry finds the key settled). Kept in
memory, by the worker that recorded it, and found again by a take-over: a worker given the
partition (after a restart or a rebalance) reads its last compaction lag once, and each
reply whose last record there is *failed* with a text (a send's) is kept, due
``ONCEONLY_LATE_SEND_CHECK_S`` after it was written (:meth:`LateSends.taken`). A failure
older than the lag is found in the partition's recovered store, read :data:`SLICE` entries
a check from the take-over on (a gap the simulator's finding F49 was first taken for). A
record does not say whether its sends' outcomes were unknown, nor whether they were read
since: each is read once more per take-over. One that does not own the reply's ledger
partition when the check falls due drops it; the letter's retry then settles the reply.
The check's reads count among the replies kept (``len``) until they end. At most
:data:`AT_MOST` threads are read a check, and a read that fails (the mail API still away)
ends the check: the reply is read again at the next, at most :data:`READS` times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

import structlog

from onceonly.processors.exceptions import SendError
from onceonly.processors.records import Table, own_slice
from onceonly.processors.reply.parts import MailSender
from onceonly.processors.reply.sending import as_found
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState, state_bytes

log = structlog.get_logger("onceonly.late_sends")

#: threads read in one check, at most (each read may take the client's whole timeout)
AT_MOST = 100
#: reads of one reply's thread that may fail before it is given up (the letter stays)
READS = 3
#: entries of a taken partition's store read a check for *failed* sends older than the
#: take-over's rows (a byte test each; only a *failed* record's value is decoded): 5,000
#: took ~13 ms a partition on the shared machine, so a worker given many at once would
#: hold its loop too long; 1,000 read a million-record partition in 1,000 checks (8 h at
#: the default 30 s audit)
SLICE = 1_000
#: the bytes every *failed* record holds: a take-over's rows decode no other
FAILED = state_bytes(ReplyState.FAILED)


class Ledger(Protocol):
    """What the check reaches of the ledger (``TableLedger``)."""

    def get(self, key: str) -> ReplyRecord | None: ...

    async def put_found(self, record: ReplyRecord, partition: int) -> None:
        """Write ``record`` (*sent*, found in its thread) to ``partition``, outside any record."""


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A reply recorded *failed* whose sends' outcomes were unknown, and when to read its
    thread (the clock's seconds)."""

    due: float
    record: ReplyRecord
    sender: MailSender
    partition: int  #: its ledger partition (a write outside a record must name it)
    failed_reads: int = 0
    #: found by a take-over, not failed here: read after this worker's own, which may still
    #: be within the window a late send lands in (a backlog of old failures waits behind)
    taken: bool = False


def due(waiting: dict[str, Unsettled], now: float, at_most: int = AT_MOST) -> list[Unsettled]:
    """The replies whose check is due (``at_most``: this worker's own failures first, then
    a take-over's, each the earliest first), out of ``waiting``."""
    ready = [u for u in waiting.values() if u.due <= now]
    ready = sorted(ready, key=lambda u: (u.taken, u.due))[:at_most]
    for unsettled in ready:
        del waiting[unsettled.record.key]
    return ready


def still_failed(unsettled: Unsettled, current: ReplyRecord | None) -> bool:
    """Whether the ledger still holds the reply as it was recorded *failed*: a retry since
    (its letter's, a redelivery's) wrote another record, and settles the reply itself."""
    return (
        current is not None and current.state is ReplyState.FAILED and current == unsettled.record
    )


def failed_sends(rows: Sequence[tuple[int, bytes, bytes | None]]) -> list[ReplyRecord]:
    """The records *failed* with a text (a send's, not a writer's) that are their key's last
    word in ``rows`` (offset, key, value; a take-over's read, in log order)."""
    last = {key: value for _, key, value in rows}
    found = []
    for value in last.values():
        if value is None or FAILED not in value:
            continue
        try:
            record = ReplyRecord.decode(value)
        except SchemaError:
            continue  # the take-over's own read logs what it cannot decode
        if record.state is ReplyState.FAILED and record.reply_text is not None:
            found.append(record)
    return found


class LateSends:
    """The replies this worker recorded *failed* with their sends' outcomes unknown."""

    def __init__(
        self,
        after_s: float,
        clock: Callable[[], float],
        partition_of: Callable[[bytes], int] = lambda key: 0,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        store: Table | None = None,
    ) -> None:
        self.after_s = after_s  #: 0: none kept (ONCEONLY_LATE_SEND_CHECK_S=0)
        self.clock = clock
        self.wall = wall  #: the clock a record's ``made_at`` is read against (the ledger's)
        #: a key's ledger partition, asked when a reply fails (within its record)
        self.partition_of = partition_of
        #: the ledger's store, read after a take-over (None: the take-over's rows alone)
        self.store = store
        self._waiting: dict[str, Unsettled] = {}
        #: each taken partition whose store is being read: the last key read, and the keys
        #: kept since the take-over (a record checked already is not kept again)
        self._scans: dict[int, tuple[bytes | None, set[str]]] = {}
        self._sender_of: Callable[[str], MailSender | None] = lambda channel: None
        self._reading = 0  #: replies a check took off the waiting and has not finished

    def __len__(self) -> int:
        """The replies kept or being read, and the stores still to read for them."""
        return len(self._waiting) + self._reading + len(self._scans)

    def failed(self, record: ReplyRecord, sender: MailSender) -> None:
        """``record`` (*failed*) was written after retryable failures: read it again later.
        Never raises into the reply path, whose record and letter are written already: a
        reply whose partition cannot be named here is not kept (logged)."""
        if self.after_s <= 0:
            return
        try:
            at = self.partition_of(record.key.encode())
        except Exception as exc:
            ids = {"key": record.key, "message_id": record.message_id}
            log.warning("late-send check not kept: no partition", error=repr(exc), **ids)
            return
        self._waiting[record.key] = Unsettled(self.clock() + self.after_s, record, sender, at)

    def taken(
        self,
        partition: int,
        rows: Sequence[tuple[int, bytes, bytes | None]],
        sender_of: Callable[[str], MailSender | None],
    ) -> None:
        """A take-over read ``partition``'s rows: each reply recorded *failed* there after a
        send (by whichever worker) and not kept here is kept, due ``after_s`` after its
        record was written (at once if that is past), read with ``sender_of`` its channel.
        The partition's store is read from its first key on, a slice a check (:meth:`check`)."""
        if self.after_s <= 0:
            return
        self._sender_of = sender_of
        kept: set[str] = set()
        self._keep(partition, failed_sends(rows), kept)
        if self.store is not None:
            self._scans[partition] = (None, kept)

    def _keep(self, partition: int, records: Sequence[ReplyRecord], kept: set[str]) -> None:
        """Keep each of ``records`` (*failed* sends of ``partition``) not kept since the
        take-over (``kept``); never raised into the take-over, whose repairs come after: a
        record that cannot be judged is left out, alone (logged)."""
        now, wall = self.clock(), self.wall()
        for record in records:
            if record.key in kept:
                continue  # kept since the take-over (and maybe checked since)
            kept.add(record.key)
            held = self._waiting.get(record.key)
            if held is not None and held.record == record:
                continue  # kept here when it failed: due as it was
            try:
                sender = self._sender_of(record.channel)
                left = self.after_s - (wall - record.made_at).total_seconds()
            except Exception as exc:
                log.warning("late-send check not kept", key=record.key, error=repr(exc))
                continue
            if sender is None:
                log.warning("late-send check not kept: no such channel", key=record.key)
                continue
            due_at = now + max(0.0, left)
            self._waiting[record.key] = Unsettled(due_at, record, sender, partition, taken=True)

    def _read_stores(self, owns: Callable[[int], bool]) -> None:
        """A slice of each taken partition's store still owned: the *failed* sends there
        (the take-over's rows hold only its last compaction lag; simulator finding F49)."""
        if self.store is None:
            return
        for partition, (after, kept) in list(self._scans.items()):
            if not owns(partition):
                del self._scans[partition]  # its next owner's take-over reads it
                continue
            try:
                entries = own_slice(self.store, partition, after, SLICE)
            except Exception as exc:  # the store closed or moving: the next check again
                log.warning("late-send checks: the store could not be read", error=repr(exc))
                continue
            self._keep(partition, failed_sends([(0, k, v) for k, v in entries]), kept)
            if len(entries) < SLICE:
                del self._scans[partition]
            else:
                self._scans[partition] = (entries[-1][0], kept)

    async def check(self, ledger: Ledger, owns: Callable[[int], bool]) -> int:
        """Read the thread of each reply due whose ledger partition this worker owns and
        whose record is still the *failed* one; record *sent* what it finds. Returns how
        many it settled. A read refused for good (a 4xx) is as if nothing was found; one that
        fails otherwise ends the check (the others are read at the next)."""
        self._read_stores(owns)
        ready = due(self._waiting, self.clock())
        self._reading += len(ready)
        try:
            return await self._read(ready, ledger, owns)
        finally:
            self._reading -= len(ready)

    async def _read(
        self, ready: list[Unsettled], ledger: Ledger, owns: Callable[[int], bool]
    ) -> int:
        settled = 0
        for n, unsettled in enumerate(ready):
            record = unsettled.record
            ids = {"key": record.key, "message_id": record.message_id}
            if not owns(unsettled.partition):
                log.info("late-send check skipped: the partition is not this worker's", **ids)
                continue
            if not still_failed(unsettled, ledger.get(record.key)):
                log.info("late-send check skipped: the reply was written since", **ids)
                continue
            try:
                found = await unsettled.sender.find_reply(record)
            except SendError as exc:
                if exc.retryable:  # the mail API away: the others wait for the next check
                    self._unread(unsettled, ready[n + 1 :], exc)
                    break
                log.info("late-send check: the thread cannot be read", error=str(exc), **ids)
                continue  # refused for good (a 404): this reply's alone, as if not found
            except Exception as exc:
                self._unread(unsettled, ready[n + 1 :], exc)
                break
            if found is None:
                log.info("late-send check: no email in the thread", **ids)
                continue
            await ledger.put_found(as_found(record, found), unsettled.partition)
            log.warning(
                "a reply recorded failed was sent after all (a request that outlived its "
                "client); recorded sent, its dead letter is settled by its retry",
                sent=str(found),
                **ids,
            )
            settled += 1
        return settled

    def _unread(self, unsettled: Unsettled, rest: list[Unsettled], exc: Exception) -> None:
        """A thread read failed: it and the replies after it wait for the next check (a
        thread that failed :data:`READS` times is given up: its letter's retry settles it)."""
        record = unsettled.record
        tries = unsettled.failed_reads + 1
        given_up = tries >= READS
        log.warning(
            "late-send check: the thread could not be read",
            error=repr(exc),
            given_up=given_up,
            key=record.key,
            message_id=record.message_id,
        )
        if not given_up:
            self._waiting[record.key] = replace(unsettled, failed_reads=tries)
        for later in rest:
            self._waiting[later.record.key] = later

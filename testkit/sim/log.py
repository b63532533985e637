"""The ledger partition the group shares: faust's table over one changelog, as the world
imitates it, and the partition and generation a lane works for."""

from __future__ import annotations

import contextvars
import random
from bisect import bisect_right
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from onceonly.foundation.topics import LEDGER_COMPACTION_LAG_MS
from onceonly.processors.fence import Position
from onceonly.processors.records import applied_after_write
from onceonly.processors.reply.ledger import TableLedger
from onceonly.processors.runtime.broker_errors import changelog_write
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.sim.io import KAFKA, MAIL, remote

if TYPE_CHECKING:
    from testkit.sim.letters import Item
    from testkit.sim.member import Member
    from testkit.sim.world import World


class TopicPartition(NamedTuple):
    """A partition as faust's TP names it (the fence logs its topic and number)."""

    topic: str
    partition: int


TP = TopicPartition("deliveries", 0)
SESSION_S = 10.0  #: a member paused or dead this long loses its partition
DRAIN_GRACE_S = 3.0  #: a revoked member's lanes get this long, then are cancelled
#: the owner's ledger audit, as the worker's timer (onceonly.processors.runtime.lifecycle)
AUDIT_S = 30.0
#: ONCEONLY_LATE_SEND_CHECK_S's default: a reply recorded failed, its sends' outcomes
#: unknown, read again this long after (on the audit's timer)
LATE_SEND_CHECK_S = 960.0
#: each way, the audit's ask for the partition's end (fixed: it draws nothing from the
#: schedule's generator, so the other calls' latencies are what they were without it)
AUDIT_LATENCY_S = 0.002

#: the ledger topic's ``min.compaction.lag.ms`` as onceonly creates it: the log cleaner
#: removes no record younger (at Kafka's default, 0, any record a later record of its key
#: follows may go at once: finding F22)
COMPACTION_LAG_S = LEDGER_COMPACTION_LAG_MS / 1000
#: of the records that land, the share after which the cleaner runs at once (the segment
#: rolled right then), besides its runs at drawn moments
CLEAN_AFTER_LANDING = 0.1

#: the partition and generation of the record a lane works for (faust's current event)
position: contextvars.ContextVar[Position | None] = contextvars.ContextVar(
    "sim_position", default=None
)


class Partition:
    """The deliveries partition and its co-partitioned ledger partition, and the group's
    word on who owns them."""

    def __init__(self) -> None:
        self.deliveries: list[Item] = []
        self.changelog: list[tuple[bytes, bytes | None]] = []
        #: who wrote each changelog record, and whether it owned the partition then
        self.writers: list[tuple[str, bool]] = []
        self.generation = 0
        self.owner: Member | None = None
        self.committed = 0
        self._records: dict[bytes, ReplyRecord] = {}
        #: when each changelog record landed (virtual time), and the offsets the log
        #: cleaner has removed (a compacted topic keeps every other record's offset)
        self.landed_at: list[float] = []
        self.removed: set[int] = set()

    def append(self, key: bytes, value: bytes | None, at: float) -> int:
        self.changelog.append((key, value))
        self.landed_at.append(at)
        return len(self.changelog) - 1

    def entries(
        self, first: int = 0, last: int | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        """What a consumer reads of the changelog from ``first`` to ``last`` (offset, key,
        value): the records the cleaner has not removed."""
        end = len(self.changelog) - 1 if last is None else min(last, len(self.changelog) - 1)
        log, removed = self.changelog, self.removed
        return [(o, *log[o]) for o in range(first, end + 1) if o not in removed]

    def compact(self, now: float, lag_s: float) -> tuple[int, int]:
        """The log cleaner's pass, as Kafka's over a compacted topic whose segments all
        rolled: of the records that landed at least ``lag_s`` ago, each key keeps its
        latest and loses every earlier one. Returns (records removed, the last offset
        cleaned; -1 for none)."""
        through = bisect_right(self.landed_at, now - lag_s) - 1
        latest: dict[bytes, int] = {}
        for offset in range(through + 1):
            if offset not in self.removed:
                latest[self.changelog[offset][0]] = offset
        kept = set(latest.values())
        gone = [o for o in range(through + 1) if o not in self.removed and o not in kept]
        self.removed.update(gone)
        return len(gone), through

    def record(self, value: bytes) -> ReplyRecord:
        """``ReplyRecord.decode(value)``, decoded once per value: the trace, a member's
        recovery and the judge all read the records the changelog holds."""
        record = self._records.get(value)
        if record is None:
            record = self._records[value] = ReplyRecord.decode(value)
        return record


class OnePartitionStore:
    """A worker's store of one ledger partition (partition 0), what the ledger asks of
    its table besides the writes: the store's values and the offset it has applied."""

    def __init__(self) -> None:
        self.store: dict[bytes, bytes] = {}
        self.applied = -1

    def get(self, key: bytes) -> bytes | None:
        return self.store.get(key)

    def partition_of(self, key: bytes) -> int:
        return 0

    def applied_offset(self, partition: int) -> int:
        return self.applied


class SimTable(OnePartitionStore):
    """A member's store of the ledger partition, over the shared changelog (as faust's
    table: ``write_through`` appends, awaits the broker's ack, then stores; the applied
    offset moves past an own write as the product's table moves it
    (:func:`~onceonly.processors.records.applied_after_write`), and to the end on a
    recovery)."""

    def __init__(self, part: Partition, world: World, member: Member) -> None:
        super().__init__()
        self.part = part
        self.world = world
        self.member = member

    def partition_of(self, key: bytes) -> int:
        """Partition 0, asked within a record only: faust's table names a key's partition
        by the current event's, and raises outside one (``FaustTable.partition_of``)."""
        if position.get() is None:
            raise TypeError("Cannot modify table key from outside of stream iteration")
        return 0

    def __getitem__(self, key: bytes) -> bytes:
        return self.store[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.store[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self.store[key]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.store.items()))

    def values(self) -> Iterator[bytes]:
        return iter(list(self.store.values()))

    def own_entries(self, partition: int, after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return iter(sorted((k, v) for k, v in self.store.items() if after is None or k > after))

    async def write_through(
        self, key: bytes, value: bytes, partition: int | None = None
    ) -> tuple[int, int]:
        def append() -> int:
            offset = self.part.append(key, value, self.world.loop.time())
            self.part.writers.append((self.member.name, self.member.owns()))
            self.world.trace("broker", _Landed(self.part, offset, key, value))
            self.world.cleaner.landed()
            if self.world.operator is not None:  # a decision applied, whoever lives to say so
                self.world.operator.landed(self.part.record(value))
            return offset

        world = self.world
        far = world.broker.produce(append)
        with changelog_write("ledger"):  # the product's seam: the broker away, or not
            offset = await remote(world.broker_latency(), far, world.broker_latency(), KAFKA)
        armed = self.member.pause_after_write
        if armed is not None and self.part.record(value).state is ReplyState.PENDING:
            self.member.pause_after_write = None
            self.world.pause(self.member, armed)  # the send that follows waits for it
        self.store[key] = value
        if self.member.cut_for(MAIL) and self.part.record(value).state is ReplyState.FAILED:
            world.failed_unread.add(self.part.record(value).message_id)  # the late send's window
        kept = applied_after_write(self.applied, offset)
        self.applied = -1 if kept is None else kept
        return 0, offset

    def recover(self) -> None:
        for _, key, value in self.part.entries(self.applied + 1):
            if value is None:
                self.store.pop(key, None)
            else:
                self.store[key] = value
        self.applied = len(self.part.changelog) - 1


class Cleaner:
    """Kafka's log cleaner over the ledger partition: it runs at moments drawn from a
    generator of its own (so the schedule's other draws are the ones they were before)
    and, for a share of the records that land, right after one lands."""

    def __init__(
        self,
        part: Partition,
        rng: random.Random,
        clock: Callable[[], float],
        trace: Callable[[str, object], None],
        lag_s: float | None = None,
    ) -> None:
        self.part, self.rng, self.clock, self.trace = part, rng, clock, trace
        self.lag_s = COMPACTION_LAG_S if lag_s is None else lag_s

    def moments(self, span_s: float) -> list[float]:
        """When the cleaner runs of its own accord (5 to 15 times over ``span_s``)."""
        return sorted(self.rng.uniform(0.0, span_s) for _ in range(self.rng.randint(5, 15)))

    def landed(self) -> None:
        if self.rng.random() < CLEAN_AFTER_LANDING:
            self.clean()

    def clean(self) -> None:
        removed, through = self.part.compact(self.clock(), self.lag_s)
        if removed:
            self.trace("broker", f"compacted the ledger through {through}: {removed} removed")


class LateLedger(TableLedger):
    """Planted bug (b): a *pending* record is held back and written only with the record
    that follows it (after the send)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: dict[str, ReplyRecord] = {}

    async def put(self, record: ReplyRecord) -> None:
        if record.state is ReplyState.PENDING:
            self._held[record.key] = record
            return
        held = self._held.pop(record.key, None)
        if held is not None:
            await super().put(held)
        await super().put(record)


class _Landed:
    """A trace event's text for a record that landed in the changelog, decoded only if the
    trace is printed (most runs only judge the ledger's last word for each key)."""

    __slots__ = ("key", "offset", "part", "value")

    def __init__(self, part: Partition, offset: int, key: bytes, value: bytes | None) -> None:
        self.part, self.offset, self.key, self.value = part, offset, key, value

    def __str__(self) -> str:
        return f"ledger@{self.offset} {_describe(self.part, self.key, self.value)}"


def _describe(part: Partition, key: bytes, value: bytes | None) -> str:
    if value is None:
        return f"{key.decode()[:14]} tombstone"
    record = part.record(value)
    extra = f" text={record.reply_text!r}" if record.reply_text else ""
    extra += f" by={record.covered_by[:14]}" if record.covered_by else ""
    return f"{record.message_id} {record.state.value}{extra}"

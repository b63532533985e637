"""faust's Kafka consumer, patched where onceonly needs more than faust gives."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as KafkaTP
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP
from mode.utils.futures import notify

from onceonly.processors.exceptions import Rebalancing
from onceonly.processors.fence import Rounds
from onceonly.processors.offsets import OffsetBook
from onceonly.processors.stalls import Position, StallWatch


class RewindingConsumer(AIOKafkaConsumer):
    """faust's Kafka consumer, with a post-rebalance seek that brings back every dropped record.

    While tables recover, faust pauses the stream partitions in its own bookkeeping only:
    aiokafka goes on fetching them. When recovery pauses the changelog partitions again,
    the set of active partitions that faust hands to the consumer thread can be empty for
    a moment, and aiokafka, given no partition, returns the records of all of them: faust
    drops the stream partitions' records (not active) once aiokafka has moved past them.
    faust counts on the seek to the committed offsets that follows to read them again, and
    then clears the agents' queues. Two holes, each losing records with no error:

    * aiokafka's ``seek_to_committed`` leaves alone a partition with no committed offset
      (or one at 0): a partition whose last owner died before its first commit (commits
      come every few seconds) goes on past the dropped records, and later acks commit
      past them;
    * a record fetched after the seek, before the queues are cleared, is dropped too.

    So the flow stops before the seek (faust resumes it right after clearing the queues),
    and a stream partition with no committed offset goes where ``auto_offset_reset`` says.
    Records read again are duplicates, which the dedupe table and the ledger skip.
    """

    #: log with faust's consumer (kept at WARNING by onceonly.foundation.logs), not as our own
    # module
    logger = logging.getLogger("faust.transport.consumer")

    async def perform_seek(self) -> None:
        self.stop_flow()  # no record reaches a queue between the seek and the clear
        await super().perform_seek()

    #: where each stream partition was read from at its assignment (its committed offset,
    #: or where ``auto_offset_reset`` sent it)
    _read_from: Mapping[TP, int] = MappingProxyType({})

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        streams = {
            TP(tp.topic, tp.partition): offset
            for tp, offset in committed.items()
            if self.app.topics.acks_enabled_for(tp.topic)
        }
        fresh = [tp for tp, offset in streams.items() if offset is None or offset <= 0]
        read_from = {tp: o for tp, o in streams.items() if o is not None and o >= 0}
        reset = self.app.conf.consumer_auto_offset_reset
        if fresh and reset in ("earliest", "latest"):
            ends = await (
                self.earliest_offsets(*fresh) if reset == "earliest" else self.highwaters(*fresh)
            )
            found = {tp: o for tp, o in ends.items() if o is not None}
            await self.seek_wait(found)
            read_from.update(found)
        self._read_from = read_from
        return committed


class TrackingConsumer(RewindingConsumer):
    """Commits what :mod:`onceonly.processors.offsets`' book says is finished, never faust's acks.

    faust's acknowledgements stay (they end its wait for in-flight records) but no longer
    move a commit: ``take_events`` acknowledges a whole batch when the loop asks for the
    next one, while the batch's work runs on in the lanes.
    """

    #: set by :func:`draining_consumer`: the worker's book of taken and finished records
    book: OffsetBook
    #: set by :func:`draining_consumer`: the check of stalled partitions
    stalls: StallWatch
    #: the ownership checks' shared rounds (:meth:`confirm_owner`)
    _owner_rounds: Rounds[TP, bool | None] | None = None

    def ack(self, message: Any) -> bool:
        if message.acked:
            return False
        message.acked = True
        self._unacked_messages.discard(message)
        notify(self._waiting_for_ack)
        return True

    def _new_offset(self, tp: TP) -> int | None:
        return self.book.committable(tp)

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Iterator[TP]:
        return (
            tp
            for tp in self.book.partitions()
            if topics is None or tp in topics or tp.topic in topics
        )

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await super().on_partitions_revoked(revoked)
        self.book.forget(revoked)
        self.stalls.forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        # every assigned partition is read again from its committed offset (perform_seek)
        self.book.forget(list(self.book.partitions()))
        self.stalls.forget(assigned)
        await super().on_partitions_assigned(assigned, generation_id)

    async def verify_all_partitions_active(self) -> None:
        """Our stall check in place of faust's (its livelock detector calls this every 2.5
        commit intervals, never during a rebalance). faust's logs fifteen lines at ERROR for
        every partition that looks inactive, every round, healthy or not:
        :mod:`onceonly.processors.stalls` logs a partition whose records wait and whose work
        does not move, once."""
        self.stalls.observe(self._stream_positions(), time.monotonic())

    def _stream_positions(self) -> list[Position]:
        """Each assigned stream partition's commit point (the book's, or where it was read
        from while nothing is taken) and its log end, as the fetches last heard it."""
        positions = []
        for tp in self.assignment():
            if not self.app.topics.acks_enabled_for(tp.topic):
                continue  # a changelog: faust's recovery watches those
            done = self.book.committable(tp)
            if done is None:
                done = self._read_from.get(tp)
            try:
                end = self.highwater(tp)
            except Exception:  # no longer assigned (a rebalance began): the next round
                continue
            if done is not None and end is not None:
                positions.append(Position(tp.topic, tp.partition, done, int(end)))
        return positions

    async def confirm_owner(self, tp: TP, generation: int, timeout_s: float) -> bool:
        """Whether this member still owns ``tp`` in ``generation``, as the broker says.

        The check is a commit of the partition's committed offset, again, with the
        member's group generation (KIP-447's fence without transactions): the group
        coordinator refuses it from a member whose session expired (a paused or partitioned
        worker), from a generation that has ended, and while the group completes a
        rebalance. A check that gets no answer within ``timeout_s`` (the coordinator
        unreachable or moving) is asked again, for as long as the generation lasts: not
        knowing is not a refusal (a refused lane drops its records, which only a
        rebalance brings back), and nothing is written or sent meanwhile.
        """
        rounds = self._rounds_for(timeout_s)
        while generation == self.app.consumer_generation_id:
            answer = await rounds(tp)
            if answer is not None:
                return answer and generation == self.app.consumer_generation_id
        return False

    def _rounds_for(self, timeout_s: float) -> Rounds[TP, bool | None]:
        """The worker's checks share rounds: the coordinator answers for the member and its
        generation, so one commit in flight answers every check asked before it started."""
        if self._owner_rounds is None:

            async def ask(tp: TP) -> bool | None:
                answer = await self._commit_as_member(self._assigned_like(tp), timeout_s)
                if answer is None:
                    self.log.warning("no answer from the group coordinator; asking again")
                return answer

            self._owner_rounds = Rounds(ask)
        return self._owner_rounds

    def _assigned_like(self, tp: TP) -> TP:
        """``tp`` if it is assigned now, else an assigned partition with a committed offset:
        a round answers for the member, and a commit of a partition that moved is refused
        whatever the generation (the waiters' own generation check covers theirs)."""
        try:
            assigned = self._thread.assignment()
        except Exception:  # the consumer is stopping: the commit will say so
            return tp
        if tp in assigned:
            return tp
        return next((other for other in self._committed_offset if other in assigned), tp)

    async def _commit_as_member(self, tp: TP, timeout_s: float) -> bool | None:
        """Commit ``tp``'s offset as this member: True if the coordinator took it, False if
        it refused, None if no answer came within ``timeout_s``."""
        # the offset committed already, again: what the check needs is the generation, not
        # progress (faust's timer commits that), and it needs no flush of the producer.
        # Before this assignment's first commit: the finished prefix, its holds flushed
        offset = self._committed_offset.get(tp)
        thread = self._thread
        try:
            if offset is None:
                offset = self.book.committable(tp)
                if offset is None:
                    return False
                await self.app.producer.flush()  # the holds behind ``offset`` are durable
            future = asyncio.run_coroutine_threadsafe(
                self._commit_on_thread_loop(thread, tp, offset, timeout_s), thread.thread_loop
            )
        except Exception as exc:  # the producer or the consumer is stopping: not a refusal
            raise Rebalancing(f"ownership of {tp} could not be checked: {exc!r}") from exc
        try:
            answer = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s + 1)
        except TimeoutError:
            future.cancel()
            return None
        if answer:
            self._committed_offset[tp] = offset
        return answer

    @staticmethod
    async def _commit_on_thread_loop(
        thread: Any, tp: TP, offset: int, timeout_s: float
    ) -> bool | None:
        """On the consumer's own loop, never through its method queue: two workers serve
        that queue, and a commit stuck on a coordinator that is down would starve faust's
        own calls (fetches, rebalances) behind it."""
        consumer = thread._ensure_consumer()
        target = KafkaTP(tp.topic, tp.partition)
        try:
            await asyncio.wait_for(
                consumer.commit({target: OffsetAndMetadata(offset, "")}), timeout_s
            )
        except TimeoutError:  # aiokafka retries what may pass: no answer yet
            return None
        except Exception:  # refused: a generation that ended, not assigned here
            return False
        return True


Drain = Callable[[], Awaitable[None]]


def draining_consumer(drain: Drain, book: OffsetBook, stalls: StallWatch) -> type[TrackingConsumer]:
    """The consumer class, whose wait for in-flight records first drains the lanes.

    faust waits, on every rebalance and at shutdown, until every record taken is
    acknowledged. A model call can take minutes, longer than a rebalance may; so the
    lanes first get ``ONCEONLY_DRAIN_GRACE_S`` to finish, then drop what is left (it is
    read again from the committed offset), and faust's wait ends. What finished is
    committed before the partitions go (with the generation that is ending).
    """

    class DrainingConsumer(TrackingConsumer):
        async def wait_empty(self) -> None:
            await drain()
            try:
                await self.commit()
            except Exception as exc:  # the group moved on: the next owner reads them again
                self.log.info("commit after the drain failed: %r", exc)
            await super().wait_empty()

    DrainingConsumer.book = book
    DrainingConsumer.stalls = stalls
    return DrainingConsumer

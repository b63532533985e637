"""faust's Kafka consumer, patched where onceonly needs more than faust gives."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP


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

    #: log with faust's consumer (kept at WARNING by foundation.logs), not as our own module
    logger = logging.getLogger("faust.transport.consumer")

    async def perform_seek(self) -> None:
        self.stop_flow()  # no record reaches a queue between the seek and the clear
        await super().perform_seek()

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        fresh = [
            TP(tp.topic, tp.partition)
            for tp, offset in committed.items()
            if (offset is None or offset <= 0) and self.app.topics.acks_enabled_for(tp.topic)
        ]
        reset = self.app.conf.consumer_auto_offset_reset
        if fresh and reset in ("earliest", "latest"):
            ends = await (
                self.earliest_offsets(*fresh) if reset == "earliest" else self.highwaters(*fresh)
            )
            await self.seek_wait({tp: o for tp, o in ends.items() if o is not None})
        return committed


Drain = Callable[[], Awaitable[None]]


def draining_consumer(drain: Drain) -> type[RewindingConsumer]:
    """The consumer class, whose wait for in-flight records first drains the lanes.

    faust waits, on every rebalance and at shutdown, until every record taken is
    acknowledged. A model call can take minutes, longer than a rebalance may; so the
    lanes first get ``ONCEONLY_DRAIN_GRACE_S`` to finish, then drop what is left (it is
    read again from the committed offset), and faust's wait ends.
    """

    class DrainingConsumer(RewindingConsumer):
        async def wait_empty(self) -> None:
            await drain()
            await super().wait_empty()

    return DrainingConsumer

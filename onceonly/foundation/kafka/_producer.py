"""An asyncio face on confluent-kafka's Producer: ``await produce()`` resolves on the ack."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _ConfluentProducer

from onceonly.foundation.kafka._connection import Connection
from onceonly.foundation.kafka._reader import TopicRange, read_batches
from onceonly.foundation.kafka.exceptions import KafkaAdapterError, ProduceFailed

#: The partitioner every producer in onceonly uses: murmur2 like the Java client and
#: aiokafka (faust), so a thread key lands on the same partition whoever produces it.
PARTITIONER = "murmur2_random"


#: confluent-kafka's "let the partitioner choose" (librdkafka's RD_KAFKA_PARTITION_UA)
_ANY_PARTITION = -1


class Delivered(NamedTuple):
    """Where the broker stored a record (a tuple: built once per record, on the hot path)."""

    topic: str
    partition: int
    offset: int


def producer_config(connection: Connection, **extra: Any) -> dict[str, Any]:
    """The settings every onceonly producer shares: durable, ordered, murmur2-partitioned,
    with the connection's brokers, security, timeout, linger and record size; ``extra``
    last (librdkafka names).

    The linger trades a few ms of latency for batches: at 1 ms a loaded broker spends
    about twice the CPU per record that it spends at 5 ms (``make bench``, ingest (c)).
    """
    timeout_ms = connection.produce_timeout_ms
    config: dict[str, Any] = connection.config()
    config |= {
        "acks": "all",
        "enable.idempotence": True,
        "partitioner": PARTITIONER,
        # A record not acknowledged within the timeout is failed locally, so we never
        # report success for it; the webhook sender retries and dedupe absorbs repeats.
        "message.timeout.ms": timeout_ms,
        "linger.ms": connection.produce_linger_ms,
        "message.max.bytes": connection.record_max_bytes,
        "socket.connection.setup.timeout.ms": min(timeout_ms, 10_000),
        "reconnect.backoff.max.ms": 1000,
    }
    config.update(extra)
    return config


def sync_producer(connection: Connection, **extra: Any) -> Any:
    """A plain confluent-kafka Producer for bulk copies (replay, dead-letter retry, loads),
    configured by :func:`producer_config`; the caller flushes it."""
    return _ConfluentProducer(producer_config(connection, **extra))


#: a record's headers, as confluent-kafka takes them
Headers = list[tuple[str, str | bytes | None]]

#: how long a bulk copy waits for acknowledgements when librdkafka's local queue is full
#: (``queue.buffering.max.messages``, 100,000 records) before it tries the record again
QUEUE_FULL_WAIT_S = 0.1


def resume_offset(reached: int, in_flight: int | None, refused: int | None) -> int:
    """Where a copy of one partition's range goes on (pure): the first record it never
    took, or an earlier one whose copy is still unacknowledged or was refused."""
    return min(x for x in (reached, in_flight, refused) if x is not None)


class BulkProducer:
    """A producer for bulk copies of records (replay). When librdkafka's local queue is
    full it waits for the broker instead of failing (a copy of any size outruns no queue),
    and it knows, per source partition, the offset before which every copy was
    acknowledged: :meth:`left` is what a stopped copy has still to do."""

    def __init__(self, config: dict[str, Any], *, wait_s: float = QUEUE_FULL_WAIT_S) -> None:
        self._producer = _ConfluentProducer(config)
        self.wait_s = wait_s
        self.acked = 0  #: copies the broker acknowledged
        self.error: str | None = None  #: the first refusal: the copy should stop
        #: per source partition: offsets whose copies are in flight, in the order sent
        self._in_flight: dict[int, dict[int, None]] = collections.defaultdict(dict)
        self._refused: dict[int, int] = {}  #: per source partition: the lowest refused
        self._reached: dict[int, int] = {}  #: per source partition: one past the last taken

    def copy(self, topic: str, msg: Message, headers: Headers | None) -> None:
        """``msg`` again, to its own partition, with ``headers`` (None: not copied); while
        the local queue is full, serve acknowledgements and try again. ProduceFailed once
        the broker refused a copy, or if this one cannot be queued at all."""
        part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
        if headers is not None:
            self._in_flight[part][offset] = None
            try:
                self._queue(topic, msg, headers, partial(self._delivered, part, offset))
            except ProduceFailed:
                del self._in_flight[part][offset]
                raise
        self.passed(part, offset)

    def _queue(self, topic: str, msg: Message, headers: Headers, report: Any) -> None:
        while True:
            try:
                part = int(msg.partition() or 0)
                self._producer.produce(topic, msg.value(), msg.key(), part, report, headers=headers)
                break
            except BufferError:
                self._producer.poll(self.wait_s)
                if self.error is not None:
                    raise ProduceFailed(self.error) from None
            except KafkaException as exc:
                where = f"{msg.partition()}:{msg.offset()}"
                raise ProduceFailed(f"could not queue the copy of {where}: {exc}") from exc
        self._producer.poll(0)

    def passed(self, partition: int, offset: int) -> None:
        """The record at ``offset`` needs no copy (or a range ends there): count it done."""
        self._reached[partition] = max(self._reached.get(partition, 0), offset + 1)

    def _delivered(self, partition: int, offset: int, err: KafkaError | None, _: Any) -> None:
        self._in_flight[partition].pop(offset, None)
        if err is None:
            self.acked += 1
            return
        self._refused[partition] = min(self._refused.get(partition, offset), offset)
        if self.error is None:
            self.error = f"the broker did not take the copy of {partition}:{offset}: {err.str()}"

    def flush(self, timeout_s: float) -> int:
        """Wait for the copies in flight; return how many are still unacknowledged."""
        return int(self._producer.flush(timeout_s))

    def left(self, ranges: Sequence[TopicRange]) -> list[TopicRange]:
        """What of ``ranges`` (one per partition) is not known to be copied: from the
        first record not acknowledged to each range's end; empty once all is done."""
        out = []
        for step in ranges:
            part = step.partition
            in_flight = next(iter(self._in_flight.get(part, ())), None)
            reached = self._reached.get(part, step.start)
            start = max(step.start, resume_offset(reached, in_flight, self._refused.get(part)))
            if start < step.end:
                out.append(TopicRange(part, start, step.end))
        return out


@dataclass(frozen=True, slots=True)
class Copied:
    """What a bulk copy did: the copies the broker acknowledged and, if it stopped before
    the end, why and the ranges still to do."""

    sent: int
    left: list[TopicRange]
    why: str | None = None


def copy_ranges(
    connection: Connection,
    topic: str,
    wanted: Sequence[TopicRange],
    *,
    headers: Callable[[Message], Headers | None],
    advance: Callable[[int], None] = lambda n: None,
    stop: Callable[[], bool] = lambda: False,
    ack_s: float = 30.0,
    **extra: Any,
) -> Copied:
    """Produce each record of ``wanted`` again, to its own partition of ``topic``, with the
    headers ``headers(record)`` gives (None: not copied); read in lists, waiting on the
    broker whenever its queue is full. Stops at the broker's first refusal, a read that
    fails, or once ``stop()`` says so, after the copies in flight are acknowledged
    (``ack_s`` at most): what is not known to be copied is in :attr:`Copied.left`.
    The producer is :func:`producer_config`'s with ``extra``."""
    copier = BulkProducer(producer_config(connection, **extra))
    why: str | None = None
    try:
        for step in (r for r in wanted if r.count):
            last = step.end - 1
            for batch in read_batches(connection, topic, step.partition, step.start, last):
                for msg in batch:
                    copier.copy(topic, msg, headers(msg))
                advance(len(batch))
                if stop():
                    raise _Stopped
            copier.passed(step.partition, last)
    except _Stopped:
        why = "stopped, as asked"
    except KafkaAdapterError as exc:
        why = str(exc)
    copier.flush(ack_s)
    left = copier.left(wanted)
    if not left:
        return Copied(copier.acked, [])
    return Copied(copier.acked, left, why or copier.error or "copies were not acknowledged")


class _Stopped(Exception):
    """``stop()`` said so."""


class AsyncProducer:
    """Produces records and awaits their acknowledgement without blocking the event loop.

    librdkafka's delivery reports are served on the event loop itself, by a short timer
    that runs while records are outstanding (:func:`next_poll_in`: 0.5 ms apart while
    reports arrive and for a while after, backing off to 50 ms while none do, as during a
    broker outage). Each report settles its record's future directly: no extra thread and
    no cross-thread wake-up per record.
    """

    def __init__(
        self, connection: Connection, *, timeout_s: float | None = None, **extra: Any
    ) -> None:
        config = producer_config(connection, **extra)
        self._producer = _ConfluentProducer(config)
        #: a record not acknowledged by then fails with ProduceFailed (librdkafka's own
        #: message.timeout.ms fails it too, but only at its next scan, up to a second later)
        self.timeout_s = timeout_s if timeout_s is not None else config["message.timeout.ms"] / 1000
        #: (deadline, future) in the order produced: the deadlines only grow, so the timer
        #: that serves delivery reports fails the expired ones from the front, with no
        #: timer of their own
        self._deadlines: collections.deque[tuple[float, asyncio.Future[Delivered]]] = (
            collections.deque()
        )
        self._outstanding = 0
        self._timer: asyncio.TimerHandle | None = None
        self._interval = POLL_FAST_S
        #: when the timer last served a report, or started
        self._last_served = 0.0
        self._loop_thread: int | None = None

    async def produce(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> Delivered:
        """Send one record; return once the broker has it (acks=all), else raise ProduceFailed."""
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        future: asyncio.Future[Delivered] = loop.create_future()
        on_delivery = partial(self._delivered, future, loop)
        try:
            self._producer.produce(
                topic,
                value,
                key,
                _ANY_PARTITION if partition is None else partition,
                on_delivery=on_delivery,
                headers=headers if isinstance(headers, list) else list(headers),
            )
        except (BufferError, KafkaException) as exc:
            raise ProduceFailed(f"could not queue a record for {topic}: {exc}") from exc
        self._outstanding += 1
        now = loop.time()
        self._deadlines.append((now + self.timeout_s, future))
        if self._timer is None:
            self._last_served = now
            self._interval = POLL_FAST_S
            self._timer = loop.call_later(POLL_FAST_S, self._serve, loop)
        return await future

    def _delivered(
        self,
        future: asyncio.Future[Delivered],
        loop: asyncio.AbstractEventLoop,
        err: KafkaError | None,
        msg: Message,
    ) -> None:
        """librdkafka's delivery report of one record: settle its future."""
        self._outstanding -= 1
        if err is None:
            outcome: Delivered | Exception = Delivered(
                msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            )
        else:
            outcome = ProduceFailed(
                f"broker did not store the record on {msg.topic()}: {err.str()}; "
                "check that the broker is up (python -m devstack broker) and retry"
            )
        if threading.get_ident() == self._loop_thread:
            _settle(future, outcome)
        else:  # served by flush() on another thread; a closed loop has no waiter
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, outcome)

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        served = self._producer.poll(0)
        now = loop.time()
        if served:
            self._last_served = now
        self._expire(now)
        if self._outstanding > 0:
            self._interval = next_poll_in(self._interval, quiet_for_s=now - self._last_served)
            self._timer = loop.call_later(self._interval, self._serve, loop)

    def _expire(self, now: float) -> None:
        """Drop settled futures from the front; fail those past their deadline."""
        deadlines = self._deadlines
        while deadlines and (deadlines[0][1].done() or deadlines[0][0] <= now):
            _, future = deadlines.popleft()
            if not future.done():  # the error built only for a record that gets it
                future.set_exception(
                    ProduceFailed(
                        f"no acknowledgement from the broker within {self.timeout_s:g} s; "
                        "check that the broker is up (python -m devstack broker) and retry"
                    )
                )

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding records; return how many are still undelivered."""
        return int(self._producer.flush(timeout_s))

    def close(self, timeout_s: float = 10.0) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        remaining = self.flush(timeout_s)
        if remaining:
            raise ProduceFailed(f"{remaining} records were not acknowledged before close")


#: the delivery-report timer's interval while reports arrive, and its longest
POLL_FAST_S = 0.0005
POLL_SLOW_S = 0.05
#: how long the timer keeps polling fast after the last report: a batch's acknowledgement
#: comes linger.ms and a broker round trip after its first record, so a timer that backed
#: off as soon as one poll found nothing would add its wait to most acknowledgements (at
#: 0.5, 1, 2, 4 ms apart, the next poll is up to 4 ms late); a broker that is away has
#: answered nothing for longer than this
POLL_PATIENCE_S = 0.1


def next_poll_in(interval: float, *, quiet_for_s: float) -> float:
    """The delay before the next poll of delivery reports, ``interval`` being the last
    one's and ``quiet_for_s`` the time since a poll last served a report (or the timer
    started): :data:`POLL_FAST_S` within :data:`POLL_PATIENCE_S` of it, then doubling up
    to :data:`POLL_SLOW_S`, which bounds the polls of an outage to 20 a second."""
    if quiet_for_s < POLL_PATIENCE_S:
        return POLL_FAST_S
    return min(max(interval, POLL_FAST_S) * 2, POLL_SLOW_S)


def _settle(future: asyncio.Future[Delivered], outcome: Delivered | Exception) -> None:
    if future.done():  # the caller gave up (timeout or cancel)
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)

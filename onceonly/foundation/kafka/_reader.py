"""The one topic reader: a range of each partition, or everything up to the current end."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from onceonly.foundation.kafka._admin import Admin
from onceonly.foundation.kafka._connection import Connection
from onceonly.foundation.kafka._errors import adapter_error
from onceonly.foundation.kafka.exceptions import BrokerUnavailable, KafkaAdapterError, TopicMissing


@dataclass(frozen=True, slots=True)
class TopicRange:
    partition: int
    start: int  #: first offset read
    end: int  #: one past the last offset read

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def format_ranges(ranges: Iterable[TopicRange]) -> str:
    """``partition:start-end`` for each range, comma-separated: what :func:`parse_ranges`
    reads back (a command line's way to say where a copy stopped)."""
    return ",".join(f"{r.partition}:{r.start}-{r.end}" for r in ranges)


def parse_ranges(text: str) -> list[TopicRange]:
    """The ranges :func:`format_ranges` wrote; ValueError, saying what is wrong, if not."""
    out: list[TopicRange] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        found = re.fullmatch(r"(\d+):(\d+)-(\d+)", part)
        if found is None:
            raise ValueError(f"{part!r} is not partition:from-to (e.g. 3:1200-5000)")
        partition, start, end = (int(g) for g in found.groups())
        if start > end or partition in {r.partition for r in out}:
            raise ValueError(f"{part!r}: a range ends after it starts, one per partition")
        out.append(TopicRange(partition, start, end))
    if not out:
        raise ValueError(f"{text!r} names no range: give partition:from-to,...")
    return out


def within(wanted: Iterable[TopicRange], current: Iterable[TopicRange]) -> list[TopicRange]:
    """``wanted`` cut to what the topic holds now (``current``: each partition from its
    first record to its end); TopicMissing for a partition the topic does not have."""
    held = {r.partition: r for r in current}
    out = []
    for r in wanted:
        now = held.get(r.partition)
        if now is None:
            raise TopicMissing(
                f"partition {r.partition} is not in the topic (it has {len(held)}); "
                "give the ranges a replay of this topic printed"
            )
        out.append(
            TopicRange(r.partition, min(max(r.start, now.start), now.end), min(r.end, now.end))
        )
    return out


def _consumer(connection: Connection, *, partition_eof: bool = True) -> Consumer:
    """A reader that belongs to no group's offsets (a fresh group id, no commits)."""
    return Consumer(
        connection.config(
            **{
                "group.id": f"onceonly-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": partition_eof,
                "auto.offset.reset": "earliest",
            }
        )
    )


def _watermarks(
    consumer: Consumer, topic: str, partition: int, timeout_s: float
) -> tuple[int, int]:
    """A new topic's partitions answer NOT_LEADER for a moment after creation: retry."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            return int(low), int(high)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise adapter_error(exc, f"read the offsets of {topic}[{partition}]") from exc
            time.sleep(0.2)


def log_ends(connection: Connection, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's log-end offset (the next record's), one consumer for all."""
    timeout_s = connection.request_timeout_s
    consumer = _consumer(connection)
    try:
        return {p: _watermarks(consumer, topic, p, timeout_s)[1] for p in partitions}
    finally:
        consumer.close()


def _since(
    consumer: Consumer, topic: str, partition: int, since: datetime, timeout_s: float
) -> TopicRange:
    """``topic[partition]`` from its first record at or after ``since`` (by the broker's
    timestamps; its end if none) to its end."""
    low, high = _watermarks(consumer, topic, partition, timeout_s)
    wanted = TopicPartition(topic, partition, int(since.timestamp() * 1000))
    [found] = consumer.offsets_for_times([wanted], timeout=timeout_s)
    start = high if found.offset < 0 else max(low, found.offset)
    return TopicRange(partition, min(start, high), high)


def tails(
    connection: Connection, topic: str, partitions: Iterable[int], since: datetime
) -> dict[int, TopicRange]:
    """Each partition's records that landed at or after ``since`` (by the broker's
    timestamps), as a range from the first of them to the log end; one consumer for all."""
    timeout_s = connection.request_timeout_s
    consumer = _consumer(connection)
    try:
        return {p: _since(consumer, topic, p, since, timeout_s) for p in partitions}
    except KafkaException as exc:
        raise adapter_error(exc, f"read the offsets of {topic}") from exc
    finally:
        consumer.close()


def ranges(
    connection: Connection,
    topic: str,
    *,
    from_offset: int | None = None,
    from_time: datetime | None = None,
    partition: int | None = None,
) -> list[TopicRange]:
    """Per partition: from the offset (or the first record at or after the time) to the end."""
    if (from_offset is None) == (from_time is None):
        raise KafkaAdapterError("give exactly one of a start offset and a start time")
    timeout_s = connection.request_timeout_s
    partitions = Admin(connection).topic_partitions().get(topic)
    if partitions is None:
        raise TopicMissing(f"topic {topic} does not exist; check its name or run onceonly topics")
    if partition is not None and not 0 <= partition < partitions:
        raise TopicMissing(f"{topic} has partitions 0..{partitions - 1}, not {partition}")
    chosen = range(partitions) if partition is None else [partition]
    consumer = _consumer(connection)
    try:
        out = []
        for p in chosen:
            if from_offset is None:
                assert from_time is not None
                out.append(_since(consumer, topic, p, from_time, timeout_s))
                continue
            low, high = _watermarks(consumer, topic, p, timeout_s)
            out.append(TopicRange(p, min(max(low, from_offset), high), high))
        return out
    except KafkaException as exc:
        raise adapter_error(exc, f"read the offsets of {topic}") from exc
    finally:
        consumer.close()


def topic_ranges(
    connection: Connection, topics: Iterable[str]
) -> dict[str, list[TopicRange] | None]:
    """Each topic's partitions from their start to their end now (None: no such topic), with
    one metadata request and one consumer for them all. A client's connections are most of
    what a range costs (on a SASL cluster each authenticates to every broker it asks), so
    a caller that wants several topics' ranges asks once here rather than :func:`ranges`
    per topic."""
    timeout_s = connection.request_timeout_s
    counts = Admin(connection).topic_partitions()
    consumer = _consumer(connection)
    try:
        out: dict[str, list[TopicRange] | None] = {}
        for topic in topics:
            count = counts.get(topic)
            out[topic] = None
            if count is not None:
                ends = [_watermarks(consumer, topic, p, timeout_s) for p in range(count)]
                out[topic] = [
                    TopicRange(p, min(low, high), high) for p, (low, high) in enumerate(ends)
                ]
        return out
    finally:
        consumer.close()


def read(connection: Connection, topic: str, wanted: list[TopicRange]) -> Iterator[Any]:
    """The records of the ranges, partition by partition (confluent Messages); each waits
    at most the connection's ``read_timeout_s``."""
    poll_timeout_s = connection.read_timeout_s
    consumer = _consumer(connection)
    try:
        for step in (r for r in wanted if r.count):
            consumer.assign([TopicPartition(topic, step.partition, step.start)])
            while True:
                msg = consumer.poll(poll_timeout_s)
                if msg is None:
                    raise BrokerUnavailable(
                        f"no record arrived from {topic}[{step.partition}] within "
                        f"{poll_timeout_s:g} s; is the broker up?"
                    )
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise adapter_error(error, f"read {topic}[{step.partition}]")
                offset = int(msg.offset() or 0)
                if offset >= step.end:
                    break
                yield msg
                if offset + 1 >= step.end:
                    break
    finally:
        consumer.close()


#: the longest a bulk read waits for a list to fill before it takes what it has
_BATCH_WAIT_S = 0.05


def read_batches(
    connection: Connection,
    topic: str,
    partition: int,
    first: int,
    last: int,
    *,
    batch: int = 10_000,
) -> Iterator[list[Any]]:
    """The records of ``topic[partition]`` from offset ``first`` to ``last`` (both included),
    in lists of up to ``batch`` confluent Messages: the bulk path, one call per list instead
    of one per record. A compacted topic has gaps: offsets missing from the range are not
    waited for. Stops at ``last`` or at the partition's end, whichever comes first."""
    poll_timeout_s = connection.read_timeout_s
    consumer = _consumer(connection)
    try:
        consumer.assign([TopicPartition(topic, partition, first)])
        quiet_since = time.monotonic()
        while True:
            # librdkafka's consume waits for a full list or its timeout, the end of the
            # partition included: ask often, take what has arrived
            msgs = consumer.consume(num_messages=batch, timeout=_BATCH_WAIT_S)
            if not msgs:
                if time.monotonic() - quiet_since > poll_timeout_s:
                    raise BrokerUnavailable(
                        f"no record arrived from {topic}[{partition}] within "
                        f"{poll_timeout_s:g} s; is the broker up?"
                    )
                continue
            quiet_since = time.monotonic()
            out: list[Any] = []
            done = False
            for msg in msgs:
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise adapter_error(error, f"read {topic}[{partition}]")
                if int(msg.offset() or 0) > last:
                    done = True
                    break
                out.append(msg)
            if out:
                yield out
                done = done or int(out[-1].offset() or 0) >= last
            if done:
                return
    except KafkaException as exc:
        raise adapter_error(exc, f"read {topic}[{partition}]") from exc
    finally:
        consumer.close()


def read_to_end(connection: Connection, topic: str) -> list[Any]:
    """Every record of ``topic`` from the beginning to its current end."""
    return list(read(connection, topic, ranges(connection, topic, from_offset=0)))


#: how often a follower asks whether a topic it waits for exists yet
_FOLLOW_RECHECK_S = 1.0
#: records a follower hands over at most per poll
_FOLLOW_BATCH = 1000


class Follower:
    """What is written to some topics from now on, as it is written: one consumer over
    every partition of them at once, each from the end it had when the follower was made
    (nothing older is read). A topic that does not exist yet is followed from its
    beginning once it does: all it holds is newer. Make it with :func:`following`."""

    def __init__(self, connection: Connection, topics: Iterable[str]) -> None:
        self._connection = connection
        self._consumer = _consumer(connection, partition_eof=False)
        self._waiting = list(dict.fromkeys(topics))  #: topics not found yet
        self._checked_at = 0.0
        try:
            self._take_up(from_end=True)
        except BaseException:
            self._consumer.close()
            raise

    def _take_up(self, *, from_end: bool) -> None:
        """Assign the partitions of the awaited topics that exist now (with leaders)."""
        counts = Admin(self._connection).topic_partitions(led_only=True)
        timeout_s = self._connection.request_timeout_s
        found = [topic for topic in self._waiting if topic in counts]
        starts = [
            TopicPartition(
                topic,
                p,
                _watermarks(self._consumer, topic, p, timeout_s)[1]
                if from_end
                else OFFSET_BEGINNING,
            )
            for topic in found
            for p in range(counts[topic])
        ]
        if starts:
            try:
                self._consumer.incremental_assign(starts)
            except KafkaException as exc:
                raise adapter_error(exc, f"follow {', '.join(found)}") from exc
        self._waiting = [topic for topic in self._waiting if topic not in found]
        self._checked_at = time.monotonic()

    def poll(self, timeout_s: float) -> list[Any]:
        """The records (confluent Messages) written since the last poll, in each partition's
        order; waits up to ``timeout_s`` for the first, returns none if nothing came."""
        if self._waiting and time.monotonic() - self._checked_at >= _FOLLOW_RECHECK_S:
            self._take_up(from_end=False)
        try:
            msgs = self._consumer.consume(num_messages=_FOLLOW_BATCH, timeout=max(0.0, timeout_s))
        except KafkaException as exc:
            raise adapter_error(exc, "follow the topics") from exc
        for msg in msgs:
            if (error := msg.error()) is not None:
                raise adapter_error(error, f"follow {msg.topic()}[{msg.partition()}]")
        return list(msgs)

    def close(self) -> None:
        self._consumer.close()


@contextlib.contextmanager
def following(connection: Connection, topics: Iterable[str]) -> Iterator[Follower]:
    """A :class:`Follower` of ``topics`` from their ends now, closed on leaving."""
    follower = Follower(connection, topics)
    try:
        yield follower
    finally:
        follower.close()

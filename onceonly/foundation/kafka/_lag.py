"""Consumer lag: a partition's log-end offset minus the group's committed offset.

Read with a consumer that carries the group id (faust's own sensors have no lag metric),
for ``onceonly lag`` and for the worker's ``onceonly_consumer_lag`` gauge.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from onceonly.foundation.kafka._connection import Connection
from onceonly.foundation.kafka._security import AuthWatch
from onceonly.foundation.kafka.exceptions import BrokerUnavailable


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    end: int
    committed: int | None  #: None: the group never committed on this partition

    @property
    def lag(self) -> int:
        return self.end - (self.committed if self.committed is not None else 0)


def consumer_lag(
    connection: Connection, group: str, topic: str, *, timeout_s: float | None = None
) -> list[PartitionLag]:
    """Per partition: the log end, the group's committed offset, and the difference.

    Committed offsets are read by a Consumer carrying the group id, without joining the
    group: the AdminClient's list_consumer_group_offsets can crash the process on a group
    the broker has not seen yet (confluent-kafka-python #1982).
    """
    bootstrap = connection.bootstrap
    if timeout_s is None:
        timeout_s = connection.read_timeout_s
    auth = AuthWatch()
    consumer = Consumer(
        connection.config(**{"group.id": group, "enable.auto.commit": False, "error_cb": auth})
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        partitions = sorted(metadata.topics[topic].partitions)
        wanted = [TopicPartition(topic, p) for p in partitions]
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=timeout_s)[1] for tp in wanted
        }
        committed = {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in consumer.committed(wanted, timeout=timeout_s)
        }
    except (KafkaException, KeyError) as exc:
        auth.raise_if_refused(consumer, bootstrap)
        raise BrokerUnavailable(
            f"could not read the lag of group {group} on {topic} at {bootstrap}: {exc}"
        ) from exc
    finally:
        consumer.close()
    return [PartitionLag(topic, p, int(ends[p]), committed.get(p)) for p in partitions]

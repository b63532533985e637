"""Consumer lag: a partition's log-end offset minus the group's committed offset.

Read with the admin client (faust's own sensors have no lag metric), for ``onceonly lag``
and for the worker's ``onceonly_consumer_lag`` gauge.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import structlog
from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from onceonly.kafka import BrokerUnavailable

log = structlog.get_logger("onceonly.lag")


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
    bootstrap: str, group: str, topic: str, *, timeout_s: float = 5.0
) -> list[PartitionLag]:
    """Per partition: the log end, the group's committed offset, and the difference.

    Committed offsets are read by a Consumer carrying the group id, without joining the
    group: the AdminClient's list_consumer_group_offsets can crash the process on a group
    the broker has not seen yet (confluent-kafka-python #1982).
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
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
        raise BrokerUnavailable(
            f"could not read the lag of group {group} on {topic} at {bootstrap}: {exc}"
        ) from exc
    finally:
        consumer.close()
    return [PartitionLag(topic, p, int(ends[p]), committed.get(p)) for p in partitions]


class LagCollector(Collector):
    """``onceonly_consumer_lag{topic, partition}``, read from the broker at scrape time."""

    def __init__(self, bootstrap: str, group: str, topics: Iterable[str]) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topics = list(topics)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "onceonly_consumer_lag",
            "Log-end offset minus the worker group's committed offset.",
            labels=["topic", "partition"],
        )
        for topic in self.topics:
            try:
                for row in consumer_lag(self.bootstrap, self.group, topic, timeout_s=2.0):
                    gauge.add_metric([row.topic, str(row.partition)], row.lag)
            except BrokerUnavailable as exc:
                log.warning("consumer lag not available", error=str(exc))
        yield gauge

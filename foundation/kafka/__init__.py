"""confluent-kafka behind one typed adapter: producing with acks, topics, broker checks."""

from foundation.kafka._admin import Admin, TopicSpec, TopicStatus
from foundation.kafka._lag import PartitionLag, consumer_lag
from foundation.kafka._producer import (
    PARTITIONER,
    AsyncProducer,
    Delivered,
    producer_config,
    producer_config_from,
)
from foundation.kafka.exceptions import (
    BrokerUnavailable,
    KafkaAdapterError,
    ProduceFailed,
    TopicMismatch,
)

__all__ = [
    "PARTITIONER",
    "Admin",
    "AsyncProducer",
    "BrokerUnavailable",
    "Delivered",
    "KafkaAdapterError",
    "PartitionLag",
    "ProduceFailed",
    "TopicMismatch",
    "TopicSpec",
    "TopicStatus",
    "consumer_lag",
    "producer_config",
    "producer_config_from",
]

"""confluent-kafka behind one typed adapter: producing with acks, topics, broker checks."""

from onceonly.kafka._admin import Admin, TopicSpec, TopicStatus
from onceonly.kafka._producer import (
    PARTITIONER,
    AsyncProducer,
    Delivered,
    producer_config,
    producer_config_from,
)
from onceonly.kafka.exceptions import (
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
    "ProduceFailed",
    "TopicMismatch",
    "TopicSpec",
    "TopicStatus",
    "producer_config",
    "producer_config_from",
]

"""confluent-kafka behind one typed adapter: producing with acks, topics, broker checks.

Every client takes a :class:`Connection` (``Connection.from_settings(settings)``): the
bootstrap, the security settings and the timeouts travel together, so none is built
without the credentials."""

from onceonly.foundation.kafka._admin import Admin, PartitionState, TopicSpec, TopicStatus
from onceonly.foundation.kafka._connection import Connection
from onceonly.foundation.kafka._errors import adapter_error
from onceonly.foundation.kafka._lag import PartitionLag, consumer_lag
from onceonly.foundation.kafka._producer import (
    PARTITIONER,
    AsyncProducer,
    Delivered,
    producer_config,
    sync_producer,
)
from onceonly.foundation.kafka._reader import (
    Follower,
    TopicRange,
    following,
    log_ends,
    ranges,
    read,
    read_batches,
    read_to_end,
    tails,
    topic_ranges,
)
from onceonly.foundation.kafka._replication import replicated_config
from onceonly.foundation.kafka._security import Security, client_security
from onceonly.foundation.kafka.exceptions import (
    AuthenticationFailed,
    BrokerUnavailable,
    KafkaAdapterError,
    ProduceFailed,
    TopicMismatch,
    TopicMissing,
)

__all__ = [
    "PARTITIONER",
    "Admin",
    "AsyncProducer",
    "AuthenticationFailed",
    "BrokerUnavailable",
    "Connection",
    "Delivered",
    "Follower",
    "KafkaAdapterError",
    "PartitionLag",
    "PartitionState",
    "ProduceFailed",
    "Security",
    "TopicMismatch",
    "TopicMissing",
    "TopicRange",
    "TopicSpec",
    "TopicStatus",
    "adapter_error",
    "client_security",
    "consumer_lag",
    "following",
    "log_ends",
    "producer_config",
    "ranges",
    "read",
    "read_batches",
    "read_to_end",
    "replicated_config",
    "sync_producer",
    "tails",
    "topic_ranges",
]

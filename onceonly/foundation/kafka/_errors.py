"""The one table that maps confluent-kafka's errors to ours, as httpx maps httpcore's.

The admin client, the topic reader and the lag reader raise through it. The producer is
the one exception by contract: whatever stops a record from being acknowledged is a
:class:`ProduceFailed` (ingest answers 503 to exactly that), whatever librdkafka's code.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from onceonly.foundation.kafka.exceptions import (
    BrokerUnavailable,
    KafkaAdapterError,
    ProduceFailed,
    TopicMissing,
)

#: librdkafka error code -> our error; a code not listed is a plain KafkaAdapterError
ERRORS: dict[int, type[KafkaAdapterError]] = {
    KafkaError._TRANSPORT: BrokerUnavailable,
    KafkaError._ALL_BROKERS_DOWN: BrokerUnavailable,
    KafkaError._TIMED_OUT: BrokerUnavailable,
    KafkaError.REQUEST_TIMED_OUT: BrokerUnavailable,
    KafkaError.LEADER_NOT_AVAILABLE: BrokerUnavailable,
    KafkaError.NOT_LEADER_FOR_PARTITION: BrokerUnavailable,
    KafkaError.NOT_ENOUGH_REPLICAS: BrokerUnavailable,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: BrokerUnavailable,
    KafkaError._MSG_TIMED_OUT: ProduceFailed,
    KafkaError.MSG_SIZE_TOO_LARGE: ProduceFailed,
    KafkaError._QUEUE_FULL: ProduceFailed,
    KafkaError.UNKNOWN_TOPIC_OR_PART: TopicMissing,
    KafkaError._UNKNOWN_TOPIC: TopicMissing,
    KafkaError._UNKNOWN_PARTITION: TopicMissing,
}


def adapter_error(
    exc: KafkaException | KafkaError | BaseException, doing: str
) -> KafkaAdapterError:
    """Our error for a confluent-kafka one; the message says what we were doing."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    code = error.code() if isinstance(error, KafkaError) else None
    kind = ERRORS.get(code, KafkaAdapterError) if code is not None else KafkaAdapterError
    return kind(f"could not {doing}: {error}")

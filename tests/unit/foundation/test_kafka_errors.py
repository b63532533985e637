"""The one table that maps confluent-kafka's errors to ours."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceonly.foundation.kafka import (
    BrokerUnavailable,
    KafkaAdapterError,
    ProduceFailed,
    TopicMissing,
    adapter_error,
)


@pytest.mark.parametrize(
    ("code", "ours"),
    [
        (KafkaError._TRANSPORT, BrokerUnavailable),
        (KafkaError._ALL_BROKERS_DOWN, BrokerUnavailable),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicMissing),
        (KafkaError._MSG_TIMED_OUT, ProduceFailed),
        (KafkaError.INVALID_CONFIG, KafkaAdapterError),
    ],
)
def test_each_code_becomes_its_error(code: int, ours: type[Exception]) -> None:
    error = adapter_error(KafkaException(KafkaError(code)), "read the offsets of t")

    assert type(error) is ours
    assert str(error).startswith("could not read the offsets of t")

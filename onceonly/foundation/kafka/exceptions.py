"""Errors of the Kafka adapter. confluent-kafka's own errors are mapped to these here."""

from onceonly.foundation.errors import OnceOnlyError


class KafkaAdapterError(OnceOnlyError):
    """Base class for Kafka problems."""


class BrokerUnavailable(KafkaAdapterError):
    """The broker did not answer; the caller should retry later (ingest answers 503)."""


class AuthenticationFailed(KafkaAdapterError):
    """The brokers refused the client's credentials; retrying will not help."""


class ProduceFailed(KafkaAdapterError):
    """The broker did not acknowledge a record in time or refused it; it is not stored."""


class TopicMismatch(KafkaAdapterError):
    """An existing topic differs from what onceonly needs; onceonly will not run on it."""


class TopicMissing(KafkaAdapterError):
    """A topic or partition does not exist; run ``onceonly topics`` or check its name."""

"""Errors of the development stack."""

from onceonly.foundation.errors import OnceOnlyError

#: lines of a tool's own output an error quotes
OUTPUT_TAIL_LINES = 25


class BrokerError(OnceOnlyError):
    """The embedded Kafka broker could not be set up, started or stopped."""

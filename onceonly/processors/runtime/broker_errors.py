"""What a failed changelog write means, decided at the seam where faust's send is awaited.

faust's aiokafka producer (``acks=-1``, no idempotence outside transactions) sends a write
again while the broker answers with a retriable error (no leader, too few in-sync
replicas, a lost connection) and, once ``producer_request_timeout`` passes, fails it with
the last such error (a broker that never answered: ``RequestTimedOutError``,
tests/integration/processors/test_broker_away.py) or ``KafkaTimeoutError`` (the batch
expired before it was sent); a send refused at once comes wrapped in faust's
``ProducerSendError``, the aiokafka error its cause (judged by that cause: faust itself
is not imported here, so the simulator can put its writes through this seam). Those are
the broker away: :class:`BrokerUnavailable`. Anything else (a record too large for the
topic, a topic refused) is this record's failure and stays what it is, for the reply
path to dead-letter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiokafka.errors import KafkaError, KafkaTimeoutError

from onceonly.processors.exceptions import BrokerUnavailable

__all__ = ["broker_away", "changelog_write"]


def broker_away(exc: BaseException) -> bool:
    """Whether a failed send says the broker is away, not that the record was refused."""
    cause = exc.__cause__ if isinstance(exc.__cause__, KafkaError) else exc
    if isinstance(cause, KafkaTimeoutError):
        return True
    return isinstance(cause, KafkaError) and bool(cause.retriable)


@contextmanager
def changelog_write(table: str) -> Iterator[None]:
    """Around an awaited changelog write of ``table``: the broker away is raised as
    :class:`BrokerUnavailable`; any other failure as it came."""
    try:
        yield
    except Exception as exc:
        if broker_away(exc):
            raise BrokerUnavailable(
                f"the broker did not take a write to the {table} table's changelog ({exc!r}); "
                "it may have landed or not: the worker exits and reads its records again"
            ) from exc
        raise

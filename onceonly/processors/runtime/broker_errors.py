"""What a failed changelog write means, decided at the seam where faust's send is awaited.

faust's aiokafka producer (``acks=-1``, no idempotence outside transactions) sends a write
again while the broker answers with a retriable error (no leader, too few in-sync
replicas, a lost connection) and, once ``producer_request_timeout`` passes, fails the
batch with the last such error: a broker that never answered, ``RequestTimedOutError``
(tests/integration/processors/test_broker_away.py); a partition with no leader,
``NotLeaderForPartitionError`` or ``LeaderNotAvailableError`` (aiokafka's accumulator).
The write may have landed or not. A sender that crashed fails every batch in flight with
a bare ``KafkaError``; a closed producer, a refused authorization and the like fail every
write alike, and so does a broker limit on timestamps (aiokafka stamps faust's writes
with this host's clock). All of these are the worker's failure, not the record's:
:class:`BrokerUnavailable`, and the worker exits (no dead letter). Only what the broker
refuses of one record stays what it is, for the reply path to dead-letter: too large,
corrupt, or an error aiokafka has no class for (``UnknownError``: its table ends at
code 79, and a refusal such as INVALID_RECORD, 87, comes as that; judged the worker's, one
bad record would crash-loop it). Anything not Kafka's passes unchanged. faust's
``ProducerSendError`` is judged by the aiokafka error it wraps (faust itself is not
imported here, so the simulator can put its writes through this seam).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    UnknownError,
)

from onceonly.processors.exceptions import BrokerUnavailable

__all__ = [
    "RECORD_REFUSED",
    "Produced",
    "acknowledged",
    "broker_away",
    "changelog",
    "changelog_write",
]

#: what the broker refuses of one record: that record's failure, never the worker's
RECORD_REFUSED = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    UnknownError,
)


def broker_away(exc: BaseException) -> bool:
    """Whether a failed send is the worker's failure (every Kafka error but a record's
    own refusal), not the record's."""
    cause = exc.__cause__ if isinstance(exc.__cause__, KafkaError) else exc
    return isinstance(cause, KafkaError) and not isinstance(cause, RECORD_REFUSED)


@contextmanager
def changelog_write(table: str) -> Iterator[None]:
    """Around an awaited changelog write of ``table``: the worker's failure is raised as
    :class:`BrokerUnavailable`; any other failure as it came."""
    with _decided(changelog(table)):
        yield


def changelog(table: str) -> str:
    """A changelog write of ``table``, as a failure names it."""
    return f"a write to the {table} table's changelog"


async def acknowledged(sent: Awaitable[object], what: str) -> object:
    """``sent`` (a send's acknowledgement) awaited, its failure decided here (``what`` names
    the write)."""
    with _decided(what):
        return await sent


@contextmanager
def _decided(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if broker_away(exc):
            raise BrokerUnavailable(
                f"the broker did not take {what} ({exc!r}); it may have landed or not: "
                "the worker exits and reads its records again"
            ) from exc
        raise


class Produced:
    """A topic the worker produces to and awaits (the dead letters'), its sends' failures
    decided at this seam: what :meth:`send` returns raises the broker away as
    :class:`BrokerUnavailable` (the worker exits: no record's failure, no retry of the
    reply that was dead-lettering, the simulator's finding F41), a record's own refusal as
    it came."""

    def __init__(self, topic: Any, name: str) -> None:
        self.topic = topic  #: faust's topic (or the simulator's)
        self.name = name

    async def send(self, **record: Any) -> Awaitable[object]:
        what = f"a record for the {self.name} topic"
        with _decided(what):
            sent = await self.topic.send(**record)
        return acknowledged(sent, what)

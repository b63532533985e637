"""The seam that tells the broker away from a record refused, with aiokafka's and faust's
own exception classes (the real ones: a renamed or re-parented class fails these)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    ProducerClosed,
    RecordListTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    for_code,
)
from faust.exceptions import ProducerSendError

from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.runtime.broker_errors import Produced, changelog_write


def _through_the_seam(error: BaseException) -> BaseException:
    try:
        with changelog_write("ledger"):
            raise error
    except Exception as exc:
        return exc
    raise AssertionError("the seam swallowed the failure")


@pytest.mark.parametrize(
    "error",
    [
        RequestTimedOutError(),  # the request unanswered until the timeout (a paused broker)
        NotLeaderForPartitionError(),  # an expired batch whose partition had no leader
        LeaderNotAvailableError(),
        NotEnoughReplicasError(),  # acks=-1 below min.insync.replicas, until it expires
        KafkaConnectionError(),
        KafkaTimeoutError(),
        KafkaError("Unexpected error during batch delivery"),  # the sender crashed
        ProducerClosed(),
        TopicAuthorizationFailedError(),  # every write alike: not this record's
        InvalidTimestampError(),  # this host's clock, which stamps every write
    ],
    ids=type,
)
def test_the_workers_failure_is_raised_as_broker_unavailable(error: Exception) -> None:
    raised = _through_the_seam(error)
    assert isinstance(raised, BrokerUnavailable)
    assert raised.__cause__ is error
    assert "ledger" in str(raised) and "may have landed or not" in str(raised)


@pytest.mark.parametrize(
    "error",
    [
        MessageSizeTooLargeError(),
        RecordListTooLargeError(),
        CorruptRecordException(),
        for_code(87)(),  # INVALID_RECORD: past aiokafka's table, an UnknownError
    ],
    ids=type,
)
def test_what_the_broker_refuses_of_one_record_stays_the_records_failure(
    error: Exception,
) -> None:
    assert _through_the_seam(error) is error


def test_a_send_faust_wrapped_is_judged_by_the_aiokafka_error_it_wraps() -> None:
    away = ProducerSendError("Error while sending")
    away.__cause__ = KafkaConnectionError()
    refused = ProducerSendError("Error while sending")
    refused.__cause__ = MessageSizeTooLargeError()

    assert isinstance(_through_the_seam(away), BrokerUnavailable)
    assert _through_the_seam(refused) is refused


def test_a_failure_that_is_not_kafkas_passes_unchanged() -> None:
    error = ValueError("an odd value")
    assert _through_the_seam(error) is error


class _Topic:
    """A topic whose send is taken, and whose acknowledgement ends with ``outcome``."""

    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome
        self.sent: list[bytes] = []

    async def send(self, *, value: bytes) -> asyncio.Future[object]:
        self.sent.append(value)
        acked: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.outcome is None:
            acked.set_result("metadata")
        else:
            acked.set_exception(self.outcome)
        return acked


async def test_a_produced_record_the_broker_never_answered_is_the_broker_away() -> None:
    """A dead letter the broker did not take (the simulator's finding F41): the worker's
    failure, never a failure of the reply that was dead-lettering (retried, lettered)."""
    topic = Produced(_Topic(RequestTimedOutError()), "dead-letter")

    acked = await topic.send(value=b"a letter")

    with pytest.raises(BrokerUnavailable, match="a record for the dead-letter topic"):
        await acked


async def test_a_produced_record_refused_stays_its_own_failure_and_one_taken_is_acked() -> None:
    with pytest.raises(MessageSizeTooLargeError):
        await (await Produced(_Topic(MessageSizeTooLargeError()), "dead-letter").send(value=b""))

    assert await (await Produced(_Topic(None), "dead-letter").send(value=b"")) == "metadata"

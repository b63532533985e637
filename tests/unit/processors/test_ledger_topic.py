"""The worker's reads of the ledger topic wait for the broker, then give up as the worker's
failure: a take-over, arbitration or an audit that reads while the broker is away is
tried again with backoff, and after ``patience_s`` raises ``LedgerUnreadable`` (a lane's
worker exits and reads its records again; the audit skips), never an error a lane would
dead-letter its messages for."""

from __future__ import annotations

import pytest

from onceonly.foundation.kafka import KafkaAdapterError
from onceonly.foundation.kafka import exceptions as kafka_errors
from onceonly.processors.exceptions import BrokerUnavailable, LedgerUnreadable
from onceonly.processors.runtime.ledger_topic import patient


def _failing(times: int, error: Exception) -> tuple[list[int], object]:
    calls: list[int] = []

    def read() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "read"

    return calls, read


async def test_a_read_the_broker_did_not_answer_is_tried_again() -> None:
    calls, read = _failing(2, kafka_errors.BrokerUnavailable("no answer"))

    found = await patient(read, "a read", patience_s=5.0, backoff_max_s=0.001)  # type: ignore[arg-type]

    assert (found, len(calls)) == ("read", 3)


async def test_a_broker_away_past_the_patience_is_the_workers_failure() -> None:
    calls, read = _failing(10**9, kafka_errors.BrokerUnavailable("no answer"))

    with pytest.raises(LedgerUnreadable, match="a read: the broker did not answer") as raised:
        await patient(read, "a read", patience_s=0.05, backoff_max_s=0.001)  # type: ignore[arg-type]

    assert len(calls) > 1 and isinstance(raised.value, BrokerUnavailable)  # the worker's


async def test_a_refusal_waiting_does_not_mend_is_the_workers_failure_at_once() -> None:
    calls, read = _failing(10**9, kafka_errors.TopicMissing("no ledger topic"))

    with pytest.raises(LedgerUnreadable, match="no ledger topic"):
        await patient(read, "a read", patience_s=5.0, backoff_max_s=0.001)  # type: ignore[arg-type]

    assert len(calls) == 1
    assert issubclass(kafka_errors.TopicMissing, KafkaAdapterError)


async def test_another_error_is_not_waited_out() -> None:
    calls, read = _failing(1, ValueError("a bug"))

    with pytest.raises(ValueError, match="a bug"):
        await patient(read, "a read", patience_s=5.0, backoff_max_s=0.001)  # type: ignore[arg-type]

    assert len(calls) == 1

"""The agent loop's routing of one record (``runtime.worker.admit_or_exit``): what escapes
the router is the worker's failure, never a record silently dropped from its batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from onceonly.processors.exceptions import BrokerUnavailable, Rebalancing
from onceonly.processors.runtime.worker import admit_or_exit


class _Router:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.admitted: list[Any] = []

    async def admit(self, record: Any) -> None:
        if self.error is not None:
            raise self.error
        self.admitted.append(record)


async def test_a_record_the_router_takes_ends_nothing() -> None:
    router, fatal = _Router(), []

    await admit_or_exit(router, "record 12", fatal.append)

    assert router.admitted == ["record 12"] and fatal == []


async def test_the_broker_away_under_the_router_ends_the_worker() -> None:
    """A ledger sweep's tombstone or a dead letter the broker did not take, in the agent
    loop: faust would restart the agent without the rest of the batch and commit past it."""
    away = BrokerUnavailable("the broker did not take a write to the ledger's changelog")
    fatal: list[BaseException] = []

    await admit_or_exit(_Router(away), "record 12", fatal.append)

    assert fatal == [away]


async def test_a_cancelled_agent_is_cancelled_not_a_failure() -> None:
    fatal: list[BaseException] = []

    with pytest.raises(asyncio.CancelledError):
        await admit_or_exit(_Router(asyncio.CancelledError()), "record 12", fatal.append)
    assert fatal == []


async def test_a_fences_refusal_goes_on_up_and_ends_nothing() -> None:
    """The partition moved, or the worker is stopping (its ownership could not be
    checked): no failure, and no exit 70 on an ordinary stop; the records are read again
    after the seek, or by the next owner."""
    refusal = Rebalancing("ownership of partition 3 could not be checked: stopping")
    fatal: list[BaseException] = []

    with pytest.raises(Rebalancing):
        await admit_or_exit(_Router(refusal), "record 12", fatal.append)
    assert fatal == []

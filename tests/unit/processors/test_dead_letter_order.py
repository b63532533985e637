"""A reply that failed is dead-lettered *before* its *failed* record is written (the
simulator's finding F33, seed 563772623): a worker stopped between the two leaves the
letter, whose retry answers the message; the other way round it left a *failed* record
with no letter, which every redelivery skips as done, and the message was never answered."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from onceonly.processors.exceptions import SendError, SendFailure, WriterFailed
from onceonly.processors.reply.once import reply_once
from onceonly.processors.writer.contract import Inbound
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.ledger import MemoryLedger
from tests.unit.processors._messages import T0, received
from tests.unit.processors._replying import StubSender, reply_parts


class Stopped(Exception):
    """The worker stopped here (a kill)."""


class StoppedAtFailed(MemoryLedger):
    """A ledger whose worker stops as it writes a *failed* record."""

    async def put(self, record: ReplyRecord) -> None:
        if record.state is ReplyState.FAILED:
            raise Stopped
        await super().put(record)


async def _stopped(write: object, sender: StubSender) -> list[tuple[str, list[str]]]:
    """Reply to one message with ``write`` and ``sender``; the letters written before the
    worker stopped at the *failed* record."""
    letters: list[tuple[str, list[str]]] = []

    async def dead_letter(record: ReplyRecord, reason: str, burst: Sequence[Inbound]) -> None:
        letters.append((reason.split()[0], [m.message_id for m in burst]))

    parts = reply_parts(StoppedAtFailed(), sender, write, dead_letter=dead_letter, now=lambda: T0)
    with pytest.raises(Stopped):
        await reply_once([received("<a@x>", T0)], parts)
    return letters


async def test_a_failed_writer_is_dead_lettered_before_its_failed_record() -> None:
    def failing(burst: Sequence[Inbound]) -> str:
        raise WriterFailed("the writer failed", attempts=3, last_error="RuntimeError('429')")

    assert await _stopped(failing, StubSender()) == [("writer_failed", ["<a@x>"])]


async def test_a_failed_send_is_dead_lettered_before_its_failed_record() -> None:
    refused = SendError(SendFailure.REJECTED, "422 from the mail API")

    assert await _stopped(lambda burst: "the reply", StubSender(refused)) == [
        ("rejected:", ["<a@x>"])
    ]

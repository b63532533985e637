"""A reply that failed is dead-lettered *before* its *failed* record is written (the
simulator's finding F33, seed 563772623): a worker stopped between the two leaves the
letter, whose retry answers the message; the other way round it left a *failed* record
with no letter, which every redelivery skips as done, and the message was never answered."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

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


def _failing(burst: Sequence[Inbound]) -> str:
    raise WriterFailed("the writer failed", attempts=3, last_error="RuntimeError('429')")


async def _dead_lettered(
    ledger: MemoryLedger, burst: list[Inbound], rewrite: frozenset[str] = frozenset()
) -> list[list[str]]:
    letters: list[list[str]] = []

    async def dead_letter(record: ReplyRecord, reason: str, messages: Sequence[Inbound]) -> None:
        letters.append([m.message_id for m in messages])

    parts = reply_parts(ledger, StubSender(), _failing, dead_letter=dead_letter, now=lambda: T0)
    await reply_once(burst, parts, rewrite=rewrite)
    return letters


async def test_every_message_of_a_failed_writers_letter_is_recorded_failed() -> None:
    # F35 (seed 631019768): a message left unrecorded kept a paused worker's late draft of
    # it as its last word, in the approvals list, and no decision could move it
    burst = [received("<a@x>", T0), received("<b@x>", T0 + timedelta(seconds=1))]
    ledger = MemoryLedger()

    assert await _dead_lettered(ledger, burst) == [["<a@x>", "<b@x>"]]
    records = [ledger.get(m.key) for m in burst]
    assert [(r.state, r.reply_text, r.error) for r in records if r is not None] == [
        (ReplyState.FAILED, None, "RuntimeError('429')")
    ] * 2


async def test_a_failed_writers_letter_leaves_a_message_recorded_before_as_it_was() -> None:
    # a draft marked superseded by the newer message (covered by it, its text kept) is
    # written again with it (rewrite): the writer failing leaves the mark as it was
    older, newer = received("<a@x>", T0), received("<b@x>", T0 + timedelta(seconds=1))
    ledger = MemoryLedger()
    mark = ReplyRecord(
        older.key, "i", "<a@x>", older.thread_key, ReplyState.COVERED, T0,
        reply_text="the old draft", covered_by=newer.key,
    )  # fmt: skip
    await ledger.put(mark)

    assert await _dead_lettered(ledger, [older, newer], frozenset({older.key})) == [
        ["<a@x>", "<b@x>"]
    ]
    assert ledger.get(older.key) == mark
    assert ledger.get(newer.key).state is ReplyState.FAILED  # type: ignore[union-attr]

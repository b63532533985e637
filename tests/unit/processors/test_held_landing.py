"""A held delivery's record is acknowledged once its hold is in the holds table's changelog
(``Lanes.ack_landed``), never before: a hold the broker did not take, acknowledged, was lost
with the worker's store while its offset was committed past it (the simulator's finding
F40). A repeat of a held event writes its entry again and is acknowledged once that landed:
a worker restarted on its own disk finds in its store an entry the changelog may lack."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError

from onceonly.ingest import normalise
from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.lanes import Lanes
from onceonly.processors.records import Record
from onceonly.processors.reorder.holds import Delivery, Holds, event_key
from onceonly.processors.router import Router
from onceonly.processors.writer.runner import Writer, WriterPolicy
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.unit.processors._pipeline import mail_pipeline


class _Changelog:
    """The holds' writes (key, partition) and, for each, what lands when the test says."""

    def __init__(self, table: dict[bytes, bytes]) -> None:
        self.table = table
        self.writes: list[tuple[bytes, int]] = []
        self.landings: list[asyncio.Future[None]] = []

    def write(self, key: bytes, value: bytes, partition: int) -> asyncio.Future[None]:
        self.table[key] = value  # the store, as FaustTable.write_soon writes it
        self.writes.append((key, partition))
        landing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.landings.append(landing)
        return landing


class _DeadLetters:
    def __init__(self) -> None:
        self.failures: list[str] = []  #: the checks of the failure letters written

    async def record_reply(self, record: Any, reason: str, envelopes: Any) -> None:
        raise AssertionError(f"dead-lettered: {reason}")

    async def record_failure(self, envelopes: Any, *, check: Any, error: str) -> None:
        self.failures.append(str(check.value))


def _delivery(n: int) -> Delivery:
    payload = payloads.agentmail_received(
        thread_id="thr-held", message_id=f"<m{n}@example.com>", timestamp="2026-12-07T10:00:00Z"
    )
    return Delivery(normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC)), (3, n))


async def _router(mail: FakeAgentMail) -> tuple[Router, _Changelog, list[Any], list[Any]]:
    table: dict[bytes, bytes] = {}
    changelog = _Changelog(table)
    acked: list[Any] = []
    failures: list[BaseException] = []
    lanes = Lanes(ack=acked.append, on_fatal=failures.append)
    holds = Holds(table, window_ms=2000, write=changelog.write)
    writer = Writer(lambda burst: "the model's reply", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(
        mail, "never", holds=holds, lanes=lanes, writer=writer, dead_letters=_DeadLetters()
    )
    return Router(pipeline.parts), changelog, acked, failures


async def _turns() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_held_deliverys_record_is_acked_once_its_hold_landed(mail: FakeAgentMail) -> None:
    router, changelog, acked, _ = await _router(mail)
    delivery = _delivery(17)
    key = delivery.envelope.thread_key.encode()

    await router._hold("record 17", key, delivery)
    await _turns()
    entry = event_key(key, delivery.envelope.event_id)
    assert changelog.writes == [(entry, 3)]  # the event's own entry, the record's partition
    assert acked == []

    changelog.landings[0].set_result(None)
    await _turns()
    assert acked == ["record 17"]


async def test_a_hold_the_broker_did_not_take_fails_the_worker_unacked(
    mail: FakeAgentMail,
) -> None:
    router, changelog, acked, failures = await _router(mail)
    delivery = _delivery(17)
    away = BrokerUnavailable("the broker did not take a write to the holds table's changelog")

    await router._hold("record 17", delivery.envelope.thread_key.encode(), delivery)
    changelog.landings[0].set_exception(away)
    await _turns()

    assert acked == []
    assert failures == [away]


async def test_a_repeat_of_a_held_event_writes_its_entry_again_and_is_acked_once_landed(
    mail: FakeAgentMail,
) -> None:
    """The worker died before its hold landed and, restarted on its own disk, reads the
    record again: its store has the entry, the changelog may not (the review of F40)."""
    router, changelog, acked, _ = await _router(mail)
    first = _delivery(17)
    key = first.envelope.thread_key.encode()
    await router._hold("record 17", key, first)

    await router._hold("record 17 again", key, first)
    await _turns()

    entry = event_key(key, first.envelope.event_id)
    assert [written for written, _ in changelog.writes] == [entry, entry]
    assert acked == []
    changelog.landings[1].set_result(None)
    await _turns()
    assert acked == ["record 17 again"]


async def test_a_hold_the_broker_refused_is_processed_at_once_and_acked_once_answered(
    mail: FakeAgentMail,
) -> None:
    """The holds changelog refuses the entry (larger than its topic takes): the worker does
    not exit, which would meet the same refusal again and again; the delivery is answered
    at once, not reordered, and its record acknowledged once it was."""
    router, changelog, acked, failures = await _router(mail)
    delivery = _delivery(17)
    mail.seed_message("support@agentmail.to", message_id="<m17@example.com>", thread_id="thr-held")
    record = Record(b"", (), 3, 17)

    await router._hold(record, delivery.envelope.thread_key.encode(), delivery)
    changelog.landings[0].set_exception(MessageSizeTooLargeError("larger than the topic takes"))
    await asyncio.wait_for(_answered(acked), 10)

    assert acked == [record]
    assert failures == []
    assert [e.replied_to_message_id for e in mail.outbox] == ["<m17@example.com>"]


async def test_a_retry_whose_refused_hold_met_its_event_held_is_acked_as_its_letter_said(
    mail: FakeAgentMail,
) -> None:
    """A dead letter's retry of an event held (``retry_raced``: its letter written again)
    whose entry, written again, the broker refused: acknowledged, not answered at once (the
    held event is its own record's, answered at its release; a review's finding)."""
    router, changelog, acked, failures = await _router(mail)
    first = _delivery(17)
    mail.seed_message("support@agentmail.to", message_id="<m17@example.com>", thread_id="thr-held")
    key = first.envelope.thread_key.encode()
    await router._hold("record 17", key, first)
    retry = Record(b"", (), 3, 40)

    await router._hold(retry, key, replace(first, position=(3, 40), replay=True))
    changelog.landings[1].set_exception(MessageSizeTooLargeError("larger than the topic takes"))
    await asyncio.wait_for(_answered(acked), 10)

    assert acked == [retry]
    assert router.parts.dead_letters.failures == ["retry_raced"]  # type: ignore[attr-defined]
    assert (failures, mail.outbox) == ([], [])


async def _answered(acked: list[Any]) -> None:
    while not acked:
        await asyncio.sleep(0.01)


def test_without_a_write_the_entry_goes_to_the_table_and_nothing_is_landing() -> None:
    table: dict[bytes, bytes] = {}
    holds = Holds(table, window_ms=2000)
    delivery = _delivery(17)
    key = delivery.envelope.thread_key.encode()

    holds.hold(delivery, now_ms=1_000)

    assert event_key(key, delivery.envelope.event_id) in table
    assert holds.landing(key) is None

"""What `python -m devstack send` makes of the records written after its post: the replies,
the worker's word on each delivery, and which records are about its deliveries at all."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from devstack.send_watch import names_one, needles, replies_in, verdicts_in
from onceonly.ingest import normalise
from onceonly.operations.outcomes import Sent
from onceonly.operations.trace import Record, Sources
from onceonly.processors.decisions import record_for
from onceonly.processors.reorder.holds import Delivery
from onceonly.schemas.decision import Stage
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads

T0 = 1_764_583_200_000  # ms
MESSAGE = "<m1@example.com>"
SENT = [Sent("A1", 204, "", "evt-1", MESSAGE), Sent("A2", 204, "", "evt-1", MESSAGE)]


def _envelope() -> Envelope:
    payload = payloads.agentmail_received(thread_id="thr-1", message_id=MESSAGE, event_id="evt-1")
    return normalise.agentmail(json.dumps(payload), {}, datetime.fromtimestamp(T0 / 1000, UTC))


def _delivery(envelope: Envelope, offset: int) -> Record:
    key, value = envelope.thread_key.encode(), envelope.encode()
    return Record(0, offset, T0 + offset, key, value, tuple(envelope.headers()))


def _claim(envelope: Envelope, state: str, offset: int) -> Record:
    value = json.dumps([state, T0 + 2000, [0, offset]]).encode()
    return Record(0, 0, T0 + 2000, envelope.dedupe_key.encode(), value)


def _duplicate(envelope: Envelope, offset: int) -> Record:
    at = datetime.fromtimestamp(T0 / 1000, UTC)
    record = record_for(Delivery(envelope, (0, offset)), Stage.DEDUPE, "duplicate", at)
    return Record(0, 0, T0, envelope.thread_key.encode(), record.encode())


def _reply(state: ReplyState, offset: int, message_id: str = MESSAGE) -> Record:
    record = ReplyRecord(
        key=f"reply-{message_id}",
        inbox_id="support@agentmail.to",
        message_id=message_id,
        thread_key="agentmail:thr-1",
        state=state,
        created_at=datetime.fromtimestamp(T0 / 1000, UTC),
    )
    return Record(0, offset, T0 + offset, record.key.encode(), record.encode())


def test_the_reply_of_a_message_is_the_latest_write_of_its_record() -> None:
    replies = replies_in([_reply(ReplyState.PENDING, 0), _reply(ReplyState.SENT, 1)])

    assert replies[MESSAGE].state is ReplyState.SENT


def test_each_delivery_gets_the_workers_word_in_topic_order() -> None:
    envelope = _envelope()
    sources = Sources(
        deliveries=[_delivery(envelope, 7), _delivery(envelope, 8)],
        events=[_claim(envelope, "in_progress", 7), _claim(envelope, "succeeded", 7)],
        decisions=[_duplicate(envelope, 8)],
    )

    assert verdicts_in(SENT, sources) == {"evt-1": ["processed", "skipped: duplicate"]}


def test_a_delivery_claimed_and_not_finished_is_in_progress() -> None:
    envelope = _envelope()
    sources = Sources(
        deliveries=[_delivery(envelope, 7)], events=[_claim(envelope, "in_progress", 7)]
    )

    assert verdicts_in(SENT[:1], sources) == {"evt-1": ["in progress"]}


def test_a_record_is_kept_when_its_key_or_value_names_a_delivery() -> None:
    envelope, wanted = _envelope(), needles(SENT)

    assert names_one(_claim(envelope, "in_progress", 7), wanted)  # key: agentmail:evt-1
    assert names_one(_reply(ReplyState.SENT, 0), wanted)  # value: the message id
    assert not names_one(_reply(ReplyState.SENT, 0, message_id="<other@example.com>"), wanted)

"""A late older message meets a draft that covers a newer one (the simulator's finding F47):
the draft is not superseded by it. Superseded, its recall (the thread's messages before the
new reply's target) would leave the newer message out, covered by a reply whose writer
never saw it. Against the local AgentMail server, the ledger in memory."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from onceonly.ingest import normalise
from onceonly.processors.approval.decisions import recallable
from onceonly.processors.conversation import Conversation
from onceonly.processors.messages import reply_key
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.bursts import chain_end
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.unit.processors._pipeline import mail_pipeline

INBOX = "support@agentmail.to"


def _key(n: int) -> str:
    return reply_key(INBOX, f"<m{n}@example.com>")


def _delivery(mail: FakeAgentMail, n: int) -> Delivery:
    message_id, at = f"<m{n}@example.com>", f"2026-11-29T10:0{n}:00.000Z"
    mail.seed_message(INBOX, message_id=message_id, thread_id="thr-a", timestamp=at)
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-a", message_id=message_id, timestamp=at
    )
    return Delivery(normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC)), (0, n))


async def _answered(mail: FakeAgentMail, pipeline: Conversation, n: int) -> None:
    outcomes: dict[str, bool] = {}
    delivery = _delivery(mail, n)
    await pipeline.act([delivery], outcomes)
    assert outcomes == {delivery.envelope.event_id: True}


async def _draft_of_m1_covering_m3(mail: FakeAgentMail) -> Conversation:
    """m1's draft, written anew covering m3 (as ``applying._answer_anew`` leaves it when a
    newer reply never saw m3), and m3 covered by it; m2, older than m3, not yet delivered."""
    write = Writer(lambda burst: f"a reply to {len(burst)} message(s)", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(mail, "always", writer=write)
    await _answered(mail, pipeline, 1)
    ledger = pipeline.parts.ledger
    draft = ledger.get(_key(1))
    assert draft is not None and draft.state is ReplyState.AWAITING
    _delivery(mail, 3)  # in the thread
    m3 = ReplyRecord(
        _key(3), INBOX, "<m3@example.com>", "agentmail:thr-a", ReplyState.COVERED, draft.created_at
    )
    await ledger.put(replace(m3, covered_by=draft.key))
    await ledger.put(replace(draft, covers=(_key(3),)))
    return pipeline


async def test_a_late_older_message_leaves_a_draft_covering_a_newer_one_waiting(
    mail: FakeAgentMail,
) -> None:
    pipeline = await _draft_of_m1_covering_m3(mail)

    await _answered(mail, pipeline, 2)

    get = pipeline.parts.ledger.get
    m1, m2 = get(_key(1)), get(_key(2))
    assert m1 is not None and m1.state is ReplyState.AWAITING  # not superseded by m2
    assert m2 is not None and m2.state is ReplyState.AWAITING and _key(1) not in (m2.covers or ())


async def test_the_newer_message_stays_covered_by_a_reply_that_saw_it(mail: FakeAgentMail) -> None:
    pipeline = await _draft_of_m1_covering_m3(mail)

    await _answered(mail, pipeline, 2)

    get = pipeline.parts.ledger.get
    end = chain_end(get, get(_key(3)), ())
    assert isinstance(end, ReplyRecord) and _key(3) in (end.covers or ())


def test_a_draft_is_recallable_only_when_every_message_it_covers_is_known() -> None:
    draft = ReplyRecord(
        _key(1), INBOX, "<m1@example.com>", "agentmail:thr-a", ReplyState.AWAITING,
        datetime(2026, 11, 29, tzinfo=UTC), "draft", covers=(_key(3),),
    )  # fmt: skip

    assert recallable(draft, {_key(1), _key(3)})
    assert not recallable(draft, {_key(1), _key(2)})
    assert recallable(replace(draft, covers=None), set())  # before version 3: saw every one

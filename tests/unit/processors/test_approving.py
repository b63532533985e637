"""A draft through the pipeline, then decisions applied as the partition's owner applies them:
against the local AgentMail server, no broker (the ledger in memory)."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from onceonly.ingest import normalise
from onceonly.processors.approval.applying import decide
from onceonly.processors.approval.decisions import Answer, apply
from onceonly.processors.conversation import Conversation
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.processors.messages import reply_key
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.bursts import supersede
from onceonly.processors.reply.parts import SendParts
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.approval import Action, ApprovalDecision, Verdict, draft_digest
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.unit.processors._pipeline import mail_pipeline

INBOX = "support@agentmail.to"
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


class _DeadLetters:
    async def record_reply(self, record: Any, reason: str, envelopes: Any) -> None:
        raise AssertionError(f"dead-lettered: {reason}")


def _pipeline(mail: FakeAgentMail, mode: str = "always", writer: Any = None) -> Conversation:
    write = Writer(writer or (lambda burst: "the model's draft"), WriterPolicy(attempts=1))
    return mail_pipeline(mail, mode, writer=write, dead_letters=_DeadLetters())


def _delivery(mail: FakeAgentMail, n: int = 1) -> Delivery:
    message_id, at, text = f"<m{n}@example.com>", f"2026-11-29T10:0{n}:00.000Z", f"message {n}"
    mail.seed_message(INBOX, message_id=message_id, thread_id="thr-a", timestamp=at, text=text)
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-a", message_id=message_id, timestamp=at, text=text
    )
    return Delivery(normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC)), (0, n))


async def _drafted(mail: FakeAgentMail, pipeline: Conversation) -> str:
    delivery = _delivery(mail)
    outcomes: dict[str, bool] = {}
    await pipeline.act([delivery], outcomes)
    assert outcomes == {delivery.envelope.event_id: True}  # acknowledged: a draft is done
    [record] = pipeline.parts.ledger.records.values()
    assert record.state is ReplyState.AWAITING
    return str(record.key)


def _decision(
    key: str, ident: str, action: Action = Action.APPROVE, text: str | None = None, by: str = "ana"
) -> ApprovalDecision:
    return ApprovalDecision(
        ident, key, "agentmail:thr-a", action, by, datetime.now(UTC), text, "no" if text else None
    )


async def test_always_drafts_and_an_approval_sends_the_draft_once(mail: FakeAgentMail) -> None:
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)
    assert mail.outbox == []

    sent = await decide(pipeline.parts, _decision(key, "d-1"))
    again = await decide(pipeline.parts, _decision(key, "d-2", by="bob"))  # a second approval

    assert [(e.text, e.idempotency_key) for e in mail.outbox] == [("the model's draft", key)]
    assert sent is not None and again is not None
    assert sent.state is again.state is ReplyState.SENT
    assert sent.approval is not None and sent.approval.by == "ana"
    states = [w.state for w in pipeline.parts.ledger.writes]  # type: ignore[attr-defined]
    assert states == [ReplyState.AWAITING, ReplyState.PENDING, ReplyState.SENT]


async def test_an_edit_is_what_the_mail_api_receives(mail: FakeAgentMail) -> None:
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)

    await decide(pipeline.parts, _decision(key, "d-1", text="a person's words"))
    late = await decide(pipeline.parts, _decision(key, "d-2", text="a late edit", by="bob"))

    assert [e.text for e in mail.outbox] == ["a person's words"]
    assert late is not None and late.approval is not None
    assert (late.approval.verdict, late.approval.by) == (Verdict.EDITED, "ana")


async def test_a_rejection_sends_nothing_and_records_why(mail: FakeAgentMail) -> None:
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)

    declined = await decide(pipeline.parts, _decision(key, "d-1", Action.REJECT))
    after = await decide(pipeline.parts, _decision(key, "d-2"))

    assert mail.outbox == []
    assert declined is not None and after is not None
    assert after.state is ReplyState.DECLINED
    assert declined.reason == "rejected by ana: rejected"


async def test_an_approval_of_another_text_sends_nothing_and_shows_the_draft_again(
    mail: FakeAgentMail,
) -> None:
    # finding F12: people read a paused worker's late draft for the key; the owner holds
    # its own. It refuses, and writes its draft again: the ledger's last word is the text
    # it would send, which the next approval names
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)
    seen = replace(_decision(key, "d-1"), draft=draft_digest("the zombie's draft"))

    refused = await decide(pipeline.parts, seen)

    assert mail.outbox == []
    assert refused is not None and refused.state is ReplyState.AWAITING
    writes = pipeline.parts.ledger.writes  # type: ignore[attr-defined]
    assert [(w.state, w.reply_text) for w in writes] == [
        (ReplyState.AWAITING, "the model's draft"),
        (ReplyState.AWAITING, "the model's draft"),  # written again
    ]

    read_again = replace(_decision(key, "d-2"), draft=draft_digest("the model's draft"))
    sent = await decide(pipeline.parts, read_again)

    assert [e.text for e in mail.outbox] == ["the model's draft"]
    assert sent is not None and sent.state is ReplyState.SENT


async def test_an_approval_recorded_but_not_sent_is_sent_when_it_comes_again(
    mail: FakeAgentMail,
) -> None:
    # the worker was killed after the pending record: the decision record comes back
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)
    pending = apply(pipeline.parts.ledger.get(key), _decision(key, "d-1", text="edited")).record
    assert pending is not None
    await pipeline.parts.ledger.put(pending)

    sent = await decide(pipeline.parts, _decision(key, "d-1", text="edited"))

    assert [e.text for e in mail.outbox] == ["edited"]
    assert sent is not None and sent.state is ReplyState.SENT


class _NoWriter:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an approval asked the writer for {name}")


async def test_an_approval_sends_the_stored_text_without_the_writer(mail: FakeAgentMail) -> None:
    pipeline = _pipeline(mail)
    key = await _drafted(mail, pipeline)
    pipeline.parts.writer = _NoWriter()  # type: ignore[assignment]
    pending = apply(pipeline.parts.ledger.get(key), _decision(key, "d-1")).record
    assert pending is not None
    await pipeline.parts.ledger.put(pending)  # approved before a crash: read the thread first

    sent = await decide(pipeline.parts, _decision(key, "d-1"))

    assert [e.text for e in mail.outbox] == ["the model's draft"]
    assert sent is not None and sent.state is ReplyState.SENT
    assert "write" not in {f.name for f in fields(SendParts)}  # a send is given no writer


async def test_never_sends_the_writers_text_without_a_draft(mail: FakeAgentMail) -> None:
    pipeline = _pipeline(mail, mode="never")
    await pipeline.act([_delivery(mail)], {})

    assert [e.text for e in mail.outbox] == ["the model's draft"]


def _noting(mail: FakeAgentMail) -> tuple[list[list[str | None]], Conversation]:
    """A pipeline whose writer notes the texts of each burst it is asked with."""
    seen: list[list[str | None]] = []

    def writer(burst: Any) -> str:
        seen.append([m.text for m in burst])
        return f"draft for {len(burst)} message(s)"

    return seen, _pipeline(mail, writer=writer)


async def test_a_newer_message_supersedes_the_waiting_draft_and_one_reply_covers_both(
    mail: FakeAgentMail,
) -> None:
    seen, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)
    newer = _delivery(mail, 2)

    outcomes: dict[str, bool] = {}
    await pipeline.act([newer], outcomes)

    records = pipeline.parts.ledger.records  # type: ignore[attr-defined]
    new_key = next(k for k, r in records.items() if r.state is ReplyState.AWAITING)
    assert seen == [["message 1"], ["message 1", "message 2"]]  # drafted again with both
    assert records[new_key].reply_text == "draft for 2 message(s)"
    assert records[new_key].covers == (old,)
    assert (records[old].state, records[old].covered_by) == (ReplyState.COVERED, new_key)
    refused = await decide(pipeline.parts, _decision(old, "d-old"))
    assert refused is not None and refused.state is ReplyState.COVERED
    assert mail.outbox == []
    await decide(pipeline.parts, _decision(new_key, "d-new"))
    assert [(e.text, e.replied_to_message_id) for e in mail.outbox] == [
        ("draft for 2 message(s)", "<m2@example.com>")
    ]
    await pipeline.act([newer], {})  # the newer message again: nothing is drafted again
    assert len(seen) == 2


async def test_a_draft_another_writer_sent_before_its_mark_landed_is_not_recalled(
    mail: FakeAgentMail,
) -> None:
    # F30: another writer (the draft's approver, paused past its session) sent the draft;
    # the ledger writes its sent record again right after the superseding mark
    # (TableLedger._keep_settled), and the draft's message is answered: not recalled
    seen, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)
    ledger = pipeline.parts.ledger
    sent = replace(ledger.get(old), state=ReplyState.SENT, sent_message_id="<theirs@x>")
    put = ledger.put

    async def put_then_theirs(record: ReplyRecord) -> None:
        await put(record)
        if record.key == old and record.state is ReplyState.COVERED:
            await put(sent)

    ledger.put = put_then_theirs  # type: ignore[method-assign]

    await pipeline.act([_delivery(mail, 2)], {})

    assert seen == [["message 1"], ["message 2"]]
    assert ledger.get(old) == sent


def test_a_decision_on_a_superseded_draft_is_refused_naming_the_newer_reply() -> None:
    from onceonly.processors.reply.bursts import supersede

    draft = ReplyRecord("reply-old", "i", "<m@x>", "agentmail:t", ReplyState.AWAITING, T0, "d")
    gone = supersede(draft, "reply-new")

    applied = apply(gone, _decision("reply-old", "d-1"))

    assert applied.answer is Answer.REFUSED
    assert "superseded by the newer reply reply-new" in applied.detail


class _Letters:
    """The dead-letter topic, kept: (the record, the reason, the envelopes) of each letter."""

    def __init__(self) -> None:
        self.letters: list[tuple[ReplyRecord, str, list[Any]]] = []

    async def record_reply(self, record: ReplyRecord, reason: str, envelopes: Any) -> None:
        self.letters.append((record, reason, list(envelopes)))


async def test_an_approved_draft_whose_send_fails_is_dead_lettered_with_every_message_it_answers(
    mail: FakeAgentMail,
) -> None:
    """F11: the letter carries an envelope for the draft's message and for the one it
    covers, and a retry of it (the envelopes replayed) sends the approved text once."""
    letters = _Letters()
    write = Writer(lambda burst: f"draft for {len(burst)}", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(mail, "always", writer=write, dead_letters=letters)
    older, newer = _delivery(mail, 1), _delivery(mail, 2)
    await pipeline.act([older, newer], {})  # one burst: one draft, for m2, covering m1
    records = pipeline.parts.ledger.records  # type: ignore[attr-defined]
    key = next(k for k, r in records.items() if r.state is ReplyState.AWAITING)
    mail.fail_next(10, 503)  # every attempt of the approved draft's send

    failed = await decide(pipeline.parts, _decision(key, "d-1"))

    assert failed is not None and failed.state is ReplyState.FAILED
    [(record, reason, envelopes)] = letters.letters
    assert record.key == key and "503" in reason
    assert sorted(e.message_id for e in envelopes) == ["<m1@example.com>", "<m2@example.com>"]
    assert {e.event_id for e in envelopes}.isdisjoint(
        {older.envelope.event_id, newer.envelope.event_id}  # succeeded: a replay skips them
    )
    mail.fail_next(0)
    replayed = [Delivery(e, (0, 10 + n), replay=True) for n, e in enumerate(envelopes)]
    outcomes: dict[str, bool] = {}
    await pipeline.act(replayed, outcomes)  # `onceonly dead-letters retry`, as the worker has it
    assert [(e.text, e.replied_to_message_id) for e in mail.outbox] == [
        ("draft for 2", "<m2@example.com>")
    ]
    assert all(outcomes.values()) and records[key].state is ReplyState.SENT


def test_the_messages_a_reply_answers_include_one_covered_through_a_draft_it_superseded() -> None:
    """m3's draft was superseded by m6's reply, which was superseded by m7's (simulator seed
    487): m7's reply answers m3 too; a covers key answered by a reply of its own does not."""
    from onceonly.processors.reply.once import answered_by
    from testkit.fakes.ledger import MemoryLedger

    def rec(key: str, state: ReplyState, **kw: Any) -> ReplyRecord:
        return ReplyRecord(key, "i", f"<{key}>", "agentmail:t", state, T0, **kw)

    ledger = MemoryLedger()
    reply = rec("m7", ReplyState.FAILED, reply_text="t", covers=("m3", "m6", "m5"))
    for record in (
        rec("m3", ReplyState.COVERED, covered_by="m6"),
        rec("m6", ReplyState.COVERED, covered_by="m7"),
        rec("m5", ReplyState.SENT, reply_text="its own"),
        reply,
    ):
        ledger.records[record.key] = record

    assert [r.key for r in answered_by(ledger, reply)] == ["m7", "m3", "m6"]


def test_a_message_made_again_for_a_dead_letter_is_the_envelope_ingest_makes_of_its_raw() -> None:
    """Each channel's envelope_again: what ingest would make of the webhook it stands for (a
    received message without its body, which the worker fetches), under a resend id."""
    from onceonly.processors.mail.nylas.channel import NylasChannel
    from onceonly.processors.mail.protocol import resend_event_id

    received = datetime(2026, 12, 4, 12, tzinfo=UTC)
    for channel in (AgentMailChannel(Any), NylasChannel(Any)):  # type: ignore[arg-type]
        record = ReplyRecord(
            "reply-k", "acct", "<m@x>", f"{channel.name}:thr", ReplyState.FAILED, T0, "t",
            channel=channel.name, message_at=T0,
        )  # fmt: skip

        envelope = channel.envelope_again(record, received)

        assert normalise.for_route(channel.name)(envelope.raw, {}, received) == envelope
        assert envelope.event_id == resend_event_id("acct", "<m@x>")
        assert (envelope.account_id, envelope.message_id) == ("acct", "<m@x>")
        assert envelope.thread_key == f"{channel.name}:thr" and envelope.truncated


def _again(delivery: Delivery, n: int) -> Delivery:
    """``delivery``'s message delivered again under another event id (a catch-up's)."""
    envelope = delivery.envelope
    return Delivery(replace(envelope, event_id=f"catchup-{envelope.event_id}"), (0, n))


async def test_a_message_delivered_again_with_a_late_older_one_leaves_the_drafts_alone(
    mail: FakeAgentMail,
) -> None:
    # m1 drafted, superseded by m2's draft, superseded by m3's; then a catch-up feeds m2
    # again with m0, a message whose webhook was lost: only m0 is new. m2's old draft (its
    # record covered by m3's reply) is not drafted again with m0: m3's draft already
    # answers m2 (the simulator's finding F20: both drafts approved answered m2 twice)
    seen: list[list[str | None]] = []

    def writer(burst: Any) -> str:
        seen.append([m.text for m in burst])
        return f"draft for {burst[-1].text}"

    pipeline = _pipeline(mail, writer=writer)
    await _drafted(mail, pipeline)
    second = _delivery(mail, 2)
    await pipeline.act([second], {})
    await pipeline.act([_delivery(mail, 3)], {})
    records = pipeline.parts.ledger.records  # type: ignore[attr-defined]
    [latest] = [k for k, r in records.items() if r.state is ReplyState.AWAITING]
    before = dict(records)

    await pipeline.act([_delivery(mail, 0), _again(second, 4)], {})

    assert seen[3:] == [["message 0"]]  # the late message alone
    waiting = sorted(r.message_id for r in records.values() if r.state is ReplyState.AWAITING)
    assert waiting == ["<m0@example.com>", "<m3@example.com>"]
    assert {k: r for k, r in records.items() if k in before} == before  # nothing rewritten
    assert records[latest].state is ReplyState.AWAITING


async def _marked_then_theirs(
    mail: FakeAgentMail, pipeline: Conversation, state: ReplyState
) -> tuple[str, str, Delivery]:
    """m1 drafted; a worker marked its draft superseded by m2 and stopped before m2's reply
    was recorded; then another writer's reply to m2 (``state``), written before the mark by
    a writer that saw m2 alone, landed (a worker past its fence check: the simulator's
    finding F32). Returns m1's key, m2's, and m2's delivery, to be delivered again."""
    old = await _drafted(mail, pipeline)
    ledger = pipeline.parts.ledger
    second = _delivery(mail, 2)
    new_key = reply_key(INBOX, "<m2@example.com>")
    await ledger.put(supersede(ledger.get(old), new_key))
    theirs = replace(
        ledger.get(old),
        key=new_key,
        message_id="<m2@example.com>",
        state=state,
        reply_text="their reply to m2 alone",
        covered_by=None,
        reason=None,
        covers=(),
    )
    await ledger.put(theirs)
    return old, new_key, second


async def _given_again(
    mail: FakeAgentMail, state: ReplyState
) -> tuple[list[list[str | None]], Conversation, str, str]:
    """:func:`_marked_then_theirs` with their reply ``state``, then m2 delivered again: the
    writer's bursts, the pipeline, m1's key and m2's."""
    seen, pipeline = _noting(mail)
    old, new_key, second = await _marked_then_theirs(mail, pipeline, state)
    await pipeline.act([_again(second, 3)], {})
    return seen, pipeline, old, new_key


async def test_a_newer_draft_that_never_saw_a_draft_marked_superseded_by_it_is_written_again(
    mail: FakeAgentMail,
) -> None:
    seen, pipeline, old, new_key = await _given_again(mail, ReplyState.AWAITING)
    ledger = pipeline.parts.ledger

    assert seen == [["message 1"], ["message 1", "message 2"]]
    assert ledger.get(new_key).state is ReplyState.AWAITING
    assert ledger.get(new_key).covers == (old,)
    assert (ledger.get(old).state, ledger.get(old).covered_by) == (ReplyState.COVERED, new_key)


async def test_a_draft_marked_superseded_by_a_reply_sent_without_it_is_answered_anew(
    mail: FakeAgentMail,
) -> None:
    seen, pipeline, old, new_key = await _given_again(mail, ReplyState.SENT)
    ledger = pipeline.parts.ledger

    assert seen == [["message 1"], ["message 1"]]  # m1 alone: m2 has its email
    assert ledger.get(new_key).state is ReplyState.SENT
    assert (ledger.get(old).state, ledger.get(old).covered_by) == (ReplyState.AWAITING, None)
    await decide(pipeline.parts, _decision(old, "d-old"))
    assert [(e.text, e.replied_to_message_id) for e in mail.outbox] == [
        ("draft for 1 message(s)", "<m1@example.com>")
    ]


async def test_a_marked_draft_between_a_burst_s_new_message_and_its_latest_is_answered_anew(
    mail: FakeAgentMail,
) -> None:
    # m1's draft marked superseded by m2, whose reply was sent without it (F32); then m0, a
    # late older message, comes with m2 delivered again: the thread is read up to m2, not
    # only before m0, so m1 (between the two) is found and answered anew
    seen, pipeline = _noting(mail)
    old, new_key, second = await _marked_then_theirs(mail, pipeline, ReplyState.SENT)

    await pipeline.act([_delivery(mail, 0), _again(second, 3)], {})

    ledger = pipeline.parts.ledger
    assert sorted(seen[1:]) == [["message 0"], ["message 1"]]
    assert (ledger.get(old).state, ledger.get(old).covered_by) == (ReplyState.AWAITING, None)
    assert ledger.get(new_key).state is ReplyState.SENT


async def test_a_reply_that_saw_a_marked_drafts_covered_message_leaves_it_out_of_the_new_one(
    mail: FakeAgentMail,
) -> None:
    # m1 and m2 drafted together (m2's draft covers m1), marked superseded by m3; m3's
    # reply, sent by a writer that saw m1 and m3 but not m2: only m2 is answered anew
    seen, pipeline = _noting(mail)
    await pipeline.act([_delivery(mail, 1), _delivery(mail, 2)], {})
    ledger = pipeline.parts.ledger
    first, second, third_key = (reply_key(INBOX, f"<m{n}@example.com>") for n in (1, 2, 3))
    third = _delivery(mail, 3)
    await ledger.put(supersede(ledger.get(second), third_key))
    theirs = replace(
        ledger.get(second),
        key=third_key,
        message_id="<m3@example.com>",
        state=ReplyState.SENT,
        reply_text="their reply to m1 and m3",
        covered_by=None,
        reason=None,
        covers=(first,),
    )
    await ledger.put(theirs)

    await pipeline.act([_again(third, 4)], {})

    assert seen == [["message 1", "message 2"], ["message 2"]]
    assert ledger.get(second).covers == ()
    assert ledger.get(first).covered_by == third_key  # answered by the reply that saw it


async def test_a_newer_message_superseding_a_draft_recalls_a_draft_marked_superseded_by_it(
    mail: FakeAgentMail,
) -> None:
    # m2's draft (another writer's, which never saw m1) is superseded by m3 before m2 is
    # delivered again: m3's writer sees m1 too, through the chain m1 -> m2
    seen, pipeline = _noting(mail)
    old, new_key, _ = await _marked_then_theirs(mail, pipeline, ReplyState.AWAITING)

    await pipeline.act([_delivery(mail, 3)], {})

    ledger = pipeline.parts.ledger
    assert seen[1:] == [["message 1", "message 2", "message 3"]]
    newest = reply_key(INBOX, "<m3@example.com>")
    assert ledger.get(newest).state is ReplyState.AWAITING
    assert set(ledger.get(newest).covers or ()) == {old, new_key}


async def test_a_draft_written_again_is_not_moved_to_a_newer_message_that_came_meanwhile(
    mail: FakeAgentMail,
) -> None:
    # m3 reaches the worker while m2's draft is written again: the rewrite stays m2's (m3
    # comes in a burst of its own, which supersedes it), or m2's old draft would wait
    # beside m3's reply, which covers m2
    seen, pipeline = _noting(mail)
    old, new_key, second = await _marked_then_theirs(mail, pipeline, ReplyState.AWAITING)
    third = _delivery(mail, 3)
    channel = pipeline.parts.channels["agentmail"]
    asked: list[int] = []

    async def newer() -> list[Any]:
        asked.append(1)
        return [await channel.inbound(third.envelope)]

    await pipeline.act([_again(second, 4)], {}, newer)

    ledger = pipeline.parts.ledger
    assert seen[1:] == [["message 1", "message 2"]]
    assert (ledger.get(new_key).state, ledger.get(new_key).covers) == (
        ReplyState.AWAITING,
        (old,),
    )
    assert ledger.get(reply_key(INBOX, "<m3@example.com>")) is None


async def _crossed(mail: FakeAgentMail) -> tuple[Conversation, str, str]:
    """The simulator's finding F28's state: m1's draft, and m2's draft covering m1 written
    by another writer (two late writers crossed), both waiting. The pipeline, m1's key and
    m2's."""
    _, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)
    _delivery(mail, 2)  # m2 in the thread
    return pipeline, old, await _landed_m2(pipeline, old)


async def _landed_m2(pipeline: Conversation, old: str, **fields: Any) -> str:
    """Another writer's draft of m2 covering m1 (``old``; ``fields`` changed), landed in
    the ledger: its key."""
    ledger = pipeline.parts.ledger
    newer = replace(
        ledger.get(old),
        key=reply_key(INBOX, "<m2@example.com>"),
        message_id="<m2@example.com>",
        **{"reply_text": "m2's draft, covering m1", "covers": (old,), **fields},
    )
    await ledger.put(newer)
    return str(newer.key)


@pytest.mark.parametrize("older_first", [True, False], ids=["older-first", "newer-sent-first"])
async def test_approving_a_draft_a_newer_reply_covers_is_refused_naming_it(
    mail: FakeAgentMail, older_first: bool
) -> None:
    # either order: the older draft's approval refused (superseded by the newer reply, a
    # draft or sent), the newer one's sent: m1 answered once
    pipeline, old, newer = await _crossed(mail)
    decisions = [_decision(old, "d-old"), _decision(newer, "d-new")]

    for decision in decisions if older_first else decisions[::-1]:
        await decide(pipeline.parts, decision)

    ledger = pipeline.parts.ledger
    assert (ledger.get(old).state, ledger.get(old).covered_by) == (ReplyState.COVERED, newer)
    assert ledger.get(newer).state is ReplyState.SENT
    assert [e.text for e in mail.outbox] == ["m2's draft, covering m1"]  # m1 answered once


async def test_approving_a_draft_a_newer_draft_listed_before_it_covers_is_refused(
    mail: FakeAgentMail,
) -> None:
    # m1 and m2 at one time (Nylas dates are whole seconds): the burst put m2 last (its
    # event id), so m2's reply covers m1, while the mail API lists m2 first
    at = "2026-11-29T10:01:00.000Z"
    mail.seed_message(INBOX, message_id="<m2@example.com>", thread_id="thr-a", timestamp=at)
    _, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)  # m1, seeded after m2 at the same time
    newer = await _landed_m2(pipeline, old)

    await decide(pipeline.parts, _decision(old, "d-old"))
    await decide(pipeline.parts, _decision(newer, "d-new"))

    assert [e.text for e in mail.outbox] == ["m2's draft, covering m1"]  # m1 answered once


async def test_a_rejected_newer_draft_does_not_block_approving_the_older(
    mail: FakeAgentMail,
) -> None:
    pipeline, old, newer = await _crossed(mail)

    await decide(pipeline.parts, _decision(newer, "d-new", Action.REJECT))
    await decide(pipeline.parts, _decision(old, "d-old"))

    assert [e.text for e in mail.outbox] == ["draft for 1 message(s)"]  # m1 answered once


async def test_a_newer_reply_whose_send_failed_does_not_block_approving_the_older(
    mail: FakeAgentMail,
) -> None:
    # m2's draft covering m1 approved, its send failed: dead-lettered with m2 alone (m1's
    # record was its own draft then). Marked covered by it, m1 would have no email and no
    # letter: approving m1's draft sends it
    letters = _Letters()
    write = Writer(lambda burst: f"draft for {len(burst)}", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(mail, "always", writer=write, dead_letters=letters)
    old = await _drafted(mail, pipeline)
    _delivery(mail, 2)
    newer = await _landed_m2(pipeline, old)
    mail.fail_next(10, 503)
    await decide(pipeline.parts, _decision(newer, "d-new"))
    mail.fail_next(0)
    assert pipeline.parts.ledger.get(newer).state is ReplyState.FAILED

    await decide(pipeline.parts, _decision(old, "d-old"))

    assert [e.replied_to_message_id for e in mail.outbox] == ["<m1@example.com>"]


@pytest.mark.parametrize(
    ("approved_first", "thread_read"),
    [(False, True), (True, True), (True, False)],
    ids=["given-m2-first", "approval-first", "approval-first-thread-unread"],
)
async def test_a_late_draft_covering_a_message_answered_apart_is_written_again_without_it(
    mail: FakeAgentMail, monkeypatch: pytest.MonkeyPatch, approved_first: bool, thread_read: bool
) -> None:
    # F28's crossed writers, the third order: m1's draft approved and sent before a late
    # writer's m2 draft covering m1 landed. Given m2, the owner writes m2's draft again
    # without m1; approved, that one does not answer m1 a second time. A decision
    # approving the late draft before that (decisions are not held by the reorder
    # window) is refused: m2's delivery, which its late writer never committed, comes to
    # the owner all the same, which writes the draft again whether the mail API lists
    # the thread then or not (the rewrite needs no thread read)
    seen, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)
    await decide(pipeline.parts, _decision(old, "d-old"))
    second = _delivery(mail, 2)
    unsent = {"state": ReplyState.AWAITING, "approval": None, "sent_message_id": None}
    late = await _landed_m2(pipeline, old, reply_text="m2's late draft, covering m1", **unsent)

    if approved_first:
        refused = await decide(pipeline.parts, _decision(late, "d-late"))
        assert refused is not None and refused.state is ReplyState.AWAITING
    if not thread_read:
        [channel] = pipeline.parts.channels.values()
        monkeypatch.setattr(channel, "history", _unreadable)
    await pipeline.act([second], {})
    await decide(pipeline.parts, _decision(late, "d-new"))

    assert seen[1:] == [["message 2"]]
    assert pipeline.parts.ledger.get(late).covers == ()
    assert [e.replied_to_message_id for e in mail.outbox] == [
        "<m1@example.com>",
        "<m2@example.com>",
    ]
    assert "m2's late draft, covering m1" not in [e.text for e in mail.outbox]


async def _unreadable(message: Any) -> Any:
    raise RuntimeError("the mail API answered 503")


async def test_a_newer_message_does_not_recall_a_message_answered_apart(
    mail: FakeAgentMail,
) -> None:
    # the third order of F28's crossed writers again, but the owner's next burst of the
    # thread is a new message m3 (not m2 again): the late m2 draft is superseded by m3
    # and its covers (m1, sent apart) recalled into m3's reply
    seen, pipeline = _noting(mail)
    old = await _drafted(mail, pipeline)
    await decide(pipeline.parts, _decision(old, "d-old"))
    _delivery(mail, 2)
    unsent = {"state": ReplyState.AWAITING, "approval": None, "sent_message_id": None}
    late = await _landed_m2(pipeline, old, reply_text="m2's late draft, covering m1", **unsent)
    third = _delivery(mail, 3)

    await pipeline.act([third], {})
    ledger = pipeline.parts.ledger
    m3 = reply_key(INBOX, "<m3@example.com>")
    await decide(pipeline.parts, _decision(m3, "d-3"))

    assert ledger.get(late).state is ReplyState.COVERED
    assert seen[1:] == [["message 2", "message 3"]]  # m1 answered apart: not recalled
    assert old not in (ledger.get(m3).covers or ())


async def test_a_late_draft_covering_an_answered_and_a_covered_message_recalls_the_covered(
    mail: FakeAgentMail,
) -> None:
    # m0 covered by the late m2 draft too (its writer saw m0 and m1): written again, m0 is
    # recalled, m1 is not
    seen, pipeline = _noting(mail)
    _delivery(mail, 0)  # m0 in the thread
    old = await _drafted(mail, pipeline)
    await decide(pipeline.parts, _decision(old, "d-old"))
    second = _delivery(mail, 2)
    ledger = pipeline.parts.ledger
    m0 = reply_key(INBOX, "<m0@example.com>")
    unsent = {"state": ReplyState.AWAITING, "approval": None, "sent_message_id": None}
    late = await _landed_m2(pipeline, old, covers=(m0, old), **unsent)
    await ledger.put(
        ReplyRecord(
            key=m0,
            inbox_id=INBOX,
            message_id="<m0@example.com>",
            thread_key="agentmail:thr-a",
            state=ReplyState.COVERED,
            created_at=T0,
            covered_by=late,
            channel="agentmail",
            message_at=T0,
        )
    )

    await pipeline.act([second], {})

    assert seen[1:] == [["message 0", "message 2"]]
    assert ledger.get(late).covers == (m0,)


async def test_a_late_draft_covering_a_message_whose_send_failed_is_written_without_it(
    mail: FakeAgentMail,
) -> None:
    # m1's draft approved, its send failed (dead-lettered: its retry sends m1's text); the
    # late m2 draft covering m1 lands. Approved as it is, m1 is answered by m2's email and
    # again by the letter's retry
    write = Writer(lambda burst: f"draft for {len(burst)}", WriterPolicy(attempts=1))
    pipeline = mail_pipeline(mail, "always", writer=write, dead_letters=_Letters())
    old = await _drafted(mail, pipeline)
    mail.fail_next(10, 503)
    await decide(pipeline.parts, _decision(old, "d-old"))
    mail.fail_next(0)
    assert pipeline.parts.ledger.get(old).state is ReplyState.FAILED
    second = _delivery(mail, 2)
    unsent = {"state": ReplyState.AWAITING, "approval": None, "sent_message_id": None}
    late = await _landed_m2(pipeline, old, reply_text="m2's late draft, covering m1", **unsent)

    await pipeline.act([second], {})

    assert pipeline.parts.ledger.get(late).covers == ()


async def test_a_message_an_earlier_draft_saw_is_covered_by_it_when_the_burst_comes_again(
    mail: FakeAgentMail,
) -> None:
    # the simulator's finding F52: m1's writer saw m0 and stopped before recording it
    # covered; m2's draft never saw m0. The burst [m0, m1, m2] again: m0 covered by m1's
    # draft (before the approval path judges m0 new), no draft of its own; both approved,
    # one email each, m0 answered by m1's
    seen, pipeline = _noting(mail)
    deliveries = [_delivery(mail, n) for n in (0, 1, 2)]
    ledger = pipeline.parts.ledger
    m0, m1, m2 = (reply_key(INBOX, f"<m{n}@example.com>") for n in (0, 1, 2))
    for n, covers in ((1, (m0,)), (2, ())):
        draft = ReplyRecord(
            reply_key(INBOX, f"<m{n}@example.com>"),
            INBOX,
            f"<m{n}@example.com>",
            "agentmail:thr-a",
            ReplyState.AWAITING,
            T0,
            f"m{n}'s draft",
            covers=covers,
        )
        await ledger.put(draft)

    await pipeline.act(deliveries, {})
    covered = ledger.get(m0)
    await decide(pipeline.parts, _decision(m1, "d1"))
    await decide(pipeline.parts, _decision(m2, "d2"))

    assert covered is not None and (covered.state, covered.covered_by) == (ReplyState.COVERED, m1)
    assert seen == []  # no writer asked
    sent = sorted((e.replied_to_message_id, e.text) for e in mail.outbox)
    assert sent == [("<m1@example.com>", "m1's draft"), ("<m2@example.com>", "m2's draft")]

"""Bursts whose messages the ledger already knows in part, and the send's 409 rule.

A message is covered only by a reply whose writer saw it; a recorded *pending* reply is
finished with its stored text, in whatever burst it comes back; a 409 key conflict whose
reply is in the thread is a reply sent, not a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.reply.arbitration import Ruling, Verdict
from onceonly.processors.reply.bursts import Plan, divide, seen_unrecorded, summarize
from onceonly.processors.reply.once import (
    BurstResult,
    Outcome,
    reply_once,
)
from onceonly.processors.writer.contract import Inbound
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.fakes.ledger import MemoryLedger
from tests.unit.processors._messages import T0, owed, received
from tests.unit.processors._replying import StubSender, reply_parts

CONFLICT = SendError(SendFailure.CONFLICT, "409 IdempotencyConflict", status=409)


def _inbound(message_id: str, minute: int) -> Inbound:
    return received(message_id, T0 + timedelta(minutes=minute))


@dataclass
class Writer:
    """Notes the message ids of each call; answers ``text for <ids>``."""

    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, burst: Sequence[Inbound]) -> str:
        ids = [m.message_id for m in burst]
        self.calls.append(ids)
        return f"text for {' '.join(ids)}"


@dataclass
class Letters:
    letters: list[tuple[ReplyRecord, str]] = field(default_factory=list)
    #: the message ids each letter carries
    named: list[list[str]] = field(default_factory=list)

    async def __call__(self, record: ReplyRecord, reason: str, burst: Sequence[Inbound]) -> None:
        self.letters.append((record, reason))
        self.named.append([m.message_id for m in burst])


@dataclass
class Run:
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    sender: StubSender = field(default_factory=StubSender)
    writer: Writer = field(default_factory=Writer)
    letters: Letters = field(default_factory=Letters)
    now: datetime = T0
    #: reply_once's other parts (an arbitration)
    options: dict[str, object] = field(default_factory=dict)

    async def __call__(
        self, burst: Sequence[Inbound], rewrite: frozenset[str] = frozenset()
    ) -> BurstResult:
        parts = reply_parts(
            self.ledger, self.sender, self.writer, self.letters, lambda: self.now, **self.options
        )
        return await reply_once(burst, parts, rewrite=rewrite)


A, B, C = _inbound("<a@x>", 0), _inbound("<b@x>", 1), _inbound("<c@x>", 2)

# -- (a) an unanswered message is answered by a reply whose writer saw it ---------------


@pytest.mark.parametrize(
    "latest",
    [
        owed(B, ReplyState.SENT, reply_text="to b", sent_message_id="<r-b@x>"),
        owed(B, ReplyState.COVERED, covered_by="reply-elsewhere"),
        owed(B, ReplyState.DECLINED, reason="out of office"),
        owed(B, ReplyState.FAILED, reply_text="to b", error="422"),
    ],
    ids=lambda record: record.state.value,
)
async def test_an_unanswered_message_released_with_a_handled_latest_gets_its_own_reply(
    latest: ReplyRecord,
) -> None:
    run = Run()
    await run.ledger.put(latest)

    await run([A, B])

    assert [(r.key, r.reply_text) for r in run.sender.sent] == [(A.key, "text for <a@x>")]
    assert run.ledger.records[A.key].state is ReplyState.SENT


async def test_a_message_an_earlier_messages_draft_saw_is_covered_by_it_not_written_again() -> None:
    # the writer of B's draft saw A and stopped before recording A covered; C's draft came
    # since: the burst again covers A by B's draft, not by a reply of its own (two emails
    # once both drafts were approved: the simulator's finding F52)
    run = Run()
    await run.ledger.put(owed(B, ReplyState.AWAITING, reply_text="to a, b", covers=(A.key, B.key)))
    await run.ledger.put(owed(C, ReplyState.AWAITING, reply_text="to c", covers=(C.key,)))

    result = await run([A, B, C])

    assert (result.outcome, run.writer.calls, run.sender.tried) == (Outcome.AWAITING, [], [])
    assert run.ledger.records[A.key] == owed(A, ReplyState.COVERED, covered_by=B.key)


async def test_an_earlier_messages_pending_reply_covers_what_its_writer_saw() -> None:
    # B's pending reply (its writer saw A) recorded, the worker stopped before A's covered
    # record; C new. A goes with B's send, not with C's reply (two emails answering A)
    run = Run()
    await run.ledger.put(owed(B, ReplyState.PENDING, reply_text="to a, b", covers=(A.key,)))

    await run([A, B, C])

    assert run.writer.calls == [["<c@x>"]]
    assert [(r.key, r.reply_text) for r in run.sender.sent] == [
        (B.key, "to a, b"),
        (C.key, "text for <c@x>"),
    ]
    assert run.ledger.records[A.key] == owed(A, ReplyState.COVERED, covered_by=B.key)


def test_a_message_with_no_record_is_covered_by_the_newest_draft_that_saw_it() -> None:
    both = (A.key, B.key, C.key)
    records = {
        A.key: None,
        B.key: owed(B, ReplyState.AWAITING, reply_text="to a, b", covers=(A.key, B.key)),
        C.key: owed(C, ReplyState.AWAITING, reply_text="to all", covers=both),
    }

    assert seen_unrecorded([C, A, B], records) == [(A, C.key)]


def test_a_reply_that_answers_on_its_own_covers_before_a_newer_draft_that_saw_the_same() -> None:
    # B sent (its writer saw A), and a late writer's draft of C saw A and B: C's draft,
    # approved, is refused for B's sake and written again; covered by it, A would be
    # written again with it and answered twice
    records = {
        A.key: None,
        B.key: owed(B, ReplyState.SENT, reply_text="to a, b", covers=(A.key,)),
        C.key: owed(C, ReplyState.AWAITING, reply_text="to all", covers=(A.key, B.key)),
    }

    assert seen_unrecorded([A, B, C], records) == [(A, B.key)]


@pytest.mark.parametrize(
    "coverer",
    [
        owed(B, ReplyState.PENDING, reply_text="to a, b", covers=(A.key, B.key)),  # arbitrated
        owed(B, ReplyState.FAILED, covers=(A.key, B.key)),  # the writer failed: no text
        owed(B, ReplyState.AWAITING, reply_text="to b", covers=(B.key,)),  # never saw A
    ],
    ids=["pending", "writer-failed", "unseen"],
)
def test_a_message_is_not_covered_by_a_reply_that_did_not_settle_with_it(
    coverer: ReplyRecord,
) -> None:
    assert seen_unrecorded([A, B], {A.key: None, B.key: coverer}) == []


async def test_an_unanswered_message_is_never_covered_by_a_reply_written_without_it() -> None:
    run = Run()
    await run.ledger.put(owed(B, ReplyState.SENT, reply_text="to b", sent_message_id="<r@x>"))

    await run([A, B])

    assert [w for w in run.ledger.writes if w.state is ReplyState.COVERED] == []


async def test_the_handled_latest_message_keeps_its_record() -> None:
    run = Run()
    handled = owed(B, ReplyState.SENT, reply_text="to b", sent_message_id="<r@x>")
    await run.ledger.put(handled)

    await run([A, B])

    assert run.ledger.records[B.key] == handled
    assert all(r.key != B.key for r in run.sender.tried)


async def test_the_unanswered_messages_get_one_reply_to_the_latest_of_them() -> None:
    run = Run()
    await run.ledger.put(owed(C, ReplyState.SENT, reply_text="to c", sent_message_id="<r@x>"))

    await run([C, B, A])

    assert run.writer.calls == [["<a@x>", "<b@x>"]]
    assert [r.key for r in run.sender.sent] == [B.key]
    covered = run.ledger.records[A.key]
    assert (covered.state, covered.covered_by) == (ReplyState.COVERED, B.key)


async def test_a_burst_that_sent_a_new_reply_says_sent_with_its_key_and_id() -> None:
    run = Run()
    await run.ledger.put(owed(B, ReplyState.SENT, reply_text="to b", sent_message_id="<r@x>"))

    result = await run([A, B])

    assert result == BurstResult(Outcome.SENT, A.key, "<sent-1@x>")


async def test_a_burst_whose_messages_all_have_records_still_answers_as_its_latest() -> None:
    run = Run()
    await run.ledger.put(owed(A, ReplyState.COVERED, covered_by=B.key))
    await run.ledger.put(owed(B, ReplyState.SENT, reply_text="to b", sent_message_id="<r@x>"))

    result = await run([A, B])

    assert result == BurstResult(Outcome.ALREADY, B.key, "<r@x>")
    assert (run.writer.calls, run.sender.tried) == ([], [])


# -- (b) a pending record is finished with its stored text, in a later burst too ----------


async def test_a_pending_record_released_with_a_newer_message_is_sent_with_its_text() -> None:
    run = Run()
    pending = owed(A, ReplyState.PENDING, reply_text="stored before the kill")
    await run.ledger.put(pending)

    await run([A, B])

    assert run.sender.sent[0] == pending
    sent = run.ledger.records[A.key]
    assert (sent.state, sent.reply_text) == (ReplyState.SENT, "stored before the kill")


async def test_the_writer_is_never_asked_again_for_a_message_with_a_pending_record() -> None:
    run = Run()
    await run.ledger.put(owed(A, ReplyState.PENDING, reply_text="stored"))

    await run([A, B])

    assert run.writer.calls == [["<b@x>"]]


async def test_the_newer_message_beside_a_pending_record_gets_a_reply_its_writer_saw() -> None:
    run = Run()
    await run.ledger.put(owed(A, ReplyState.PENDING, reply_text="stored"))

    await run([A, B])

    assert [(r.key, r.reply_text) for r in run.sender.sent[1:]] == [(B.key, "text for <b@x>")]
    assert run.ledger.records[B.key].state is ReplyState.SENT


async def test_an_unrecorded_message_older_than_a_pending_latest_reply_is_covered_by_it() -> None:
    # a pending record is written just before the records of the messages its writer saw:
    # a kill between the two leaves exactly this, and the writer saw message A
    run = Run()
    await run.ledger.put(owed(B, ReplyState.PENDING, reply_text="stored for b"))

    await run([A, B])

    assert [(r.key, r.reply_text) for r in run.sender.sent] == [(B.key, "stored for b")]
    assert run.writer.calls == []
    covered = run.ledger.records[A.key]
    assert (covered.state, covered.covered_by) == (ReplyState.COVERED, B.key)


@pytest.mark.parametrize("ruling", [Ruling.ADOPT, Ruling.SENT])
async def test_a_pending_latest_reply_another_writer_answered_first_never_covers_the_unseen(
    ruling: Ruling,
) -> None:
    # F21 where a pending reply is finished: B's pending reply (its writer saw A) was
    # recorded after another writer's reply of B, whose writer never saw A; that reply
    # answers B, and A, which no writer of it saw, gets a reply of its own
    run = Run()
    theirs = owed(B, ReplyState.PENDING, reply_text="theirs for b", covers=())
    if ruling is Ruling.SENT:
        theirs = theirs.with_state(ReplyState.SENT, sent_message_id="<r-b@x>")

    async def came_first(record: ReplyRecord) -> Verdict:
        return Verdict(ruling, theirs) if record.key == B.key else Verdict(Ruling.OWN, record)

    run.options["arbitrate"] = came_first
    await run.ledger.put(owed(B, ReplyState.PENDING, reply_text="for a and b", covers=(A.key,)))

    await run([A, B])

    sent = [(r.key, r.reply_text) for r in run.sender.sent]
    own_b = [(B.key, "theirs for b")] if ruling is Ruling.ADOPT else []
    assert sent == [*own_b, (A.key, "text for <a@x>")]
    assert run.ledger.records[A.key].state is ReplyState.SENT


# F25: a waiting draft's messages, recalled by the newer message that superseded it (their
# records: the draft *covered* by that message, its older message by the draft), where the
# newer message's reply turns out to be another writer's, whose writer never saw them. The
# recall's clocks may put the draft's older message last (seed 513866219): the reply
# written anew goes to it, and the draft's record must name that reply, not the chain
# through the newer message
D, C1 = _inbound("<d@x>", 1), _inbound("<c1@x>", 2)
N, L = _inbound("<n@x>", 3), _inbound("<l@x>", 4)


async def _superseded_draft(run: Run) -> None:
    await run.ledger.put(owed(C1, ReplyState.COVERED, covered_by=D.key))
    await run.ledger.put(
        owed(D, ReplyState.COVERED, covered_by=N.key, reply_text="draft", covers=(C1.key,))
    )


async def test_a_recalled_draft_whose_newer_message_another_writer_answered_names_the_new() -> None:
    run = Run()
    await _superseded_draft(run)
    await run.ledger.put(owed(L, ReplyState.AWAITING, reply_text="theirs", covers=(N.key,)))

    await run([D, C1, N, L], rewrite=frozenset({D.key, C1.key}))

    assert run.writer.calls == [["<d@x>", "<c1@x>"]]
    assert run.ledger.records[C1.key].state is ReplyState.SENT
    draft = run.ledger.records[D.key]
    assert (draft.state, draft.covered_by) == (ReplyState.COVERED, C1.key)
    assert run.ledger.records[N.key].covered_by == L.key


async def test_recalled_messages_a_pending_reply_saw_are_written_anew_when_another_came_first() -> (
    None
):
    # the same, where the latest message's own pending reply saw them, but another
    # writer's reply of it came first (adopted), which saw only the newer message N
    run = Run()
    await _superseded_draft(run)
    theirs = owed(L, ReplyState.PENDING, reply_text="theirs", covers=(N.key,))

    async def came_first(record: ReplyRecord) -> Verdict:
        return Verdict(Ruling.ADOPT, theirs) if record.key == L.key else Verdict(Ruling.OWN, record)

    run.options["arbitrate"] = came_first
    ours = owed(L, ReplyState.PENDING, reply_text="ours", covers=(D.key, C1.key, N.key))
    await run.ledger.put(ours)

    await run([D, C1, N, L], rewrite=frozenset({D.key, C1.key}))

    assert run.writer.calls == [["<d@x>", "<c1@x>"]]
    assert [(r.key, r.reply_text) for r in run.sender.sent] == [
        (L.key, "theirs"),
        (C1.key, "text for <d@x> <c1@x>"),
    ]
    draft = run.ledger.records[D.key]
    assert (draft.state, draft.covered_by) == (ReplyState.COVERED, C1.key)
    assert run.ledger.records[N.key].covered_by == L.key


async def test_an_unrecorded_message_a_sent_latest_reply_saw_is_covered_by_it() -> None:
    # the worker that wrote B's reply paused past its session before A's covered record
    # landed; the next owner sent B's pending reply, then meets A again (finding F4)
    run = Run()
    sent = owed(B, ReplyState.SENT, reply_text="for a and b", covers=(A.key,))
    await run.ledger.put(sent)

    await run([A, B])

    assert (run.writer.calls, run.sender.tried) == ([], [])
    covered = run.ledger.records[A.key]
    assert (covered.state, covered.covered_by) == (ReplyState.COVERED, B.key)


async def test_a_message_recorded_covered_goes_with_its_pending_reply_into_its_dead_letter() -> (
    None
):
    # the worker recorded B's pending reply and A covered by it, then stopped before the
    # send; the next owner's send fails: A's answer was that send, so A is dead-lettered
    # with it rather than left covered by a reply that has no email (simulator seed
    # 384256741)
    run = Run(sender=StubSender(SendError(SendFailure.REJECTED, "422")))
    await run.ledger.put(owed(B, ReplyState.PENDING, reply_text="for a and b", covers=(A.key,)))
    await run.ledger.put(owed(A, ReplyState.COVERED, covered_by=B.key))

    result = await run([A, B])

    assert result.outcome is Outcome.FAILED
    assert run.letters.named == [[A.message_id, B.message_id]]


async def test_a_pending_record_in_a_later_burst_looks_in_the_thread_first() -> None:
    run = Run(sender=StubSender(found="<r-a@x>"))
    await run.ledger.put(owed(A, ReplyState.PENDING, reply_text="stored"))

    await run([A, B])

    assert run.sender.reads == [A.key]
    assert [r.key for r in run.sender.sent] == [B.key]
    assert run.ledger.records[A.key].sent_message_id == "<r-a@x>"


# -- (c) a 409 key conflict is confirmed in the thread ---------------------------------


async def test_a_key_conflict_whose_reply_is_in_the_thread_is_recorded_sent_with_its_id() -> None:
    run = Run(sender=StubSender(CONFLICT, found="<theirs@x>"))

    result = await run([A])

    record = run.ledger.records[A.key]
    assert (record.state, record.sent_message_id) == (ReplyState.SENT, "<theirs@x>")
    assert result == BurstResult(Outcome.ALREADY, A.key, "<theirs@x>")


async def test_a_key_conflict_whose_reply_is_in_the_thread_is_not_dead_lettered() -> None:
    run = Run(sender=StubSender(CONFLICT, found="<theirs@x>"))

    await run([A])

    assert run.letters.letters == []
    assert len(run.sender.tried) == 1  # confirmed by a read, never sent again


async def test_a_key_conflict_with_no_reply_in_the_thread_is_still_a_dead_lettered_failure() -> (
    None
):
    run = Run(sender=StubSender(CONFLICT, found=None))

    result = await run([A])

    assert result == BurstResult(Outcome.FAILED, A.key)
    assert run.sender.reads == [A.key]
    [(record, reason)] = run.letters.letters
    assert record.state is ReplyState.FAILED and reason.startswith("key_conflict")
    assert run.ledger.records[A.key].state is ReplyState.FAILED


async def test_other_refusals_are_not_looked_up_in_the_thread() -> None:
    run = Run(sender=StubSender(SendError(SendFailure.REJECTED, "422"), found="<theirs@x>"))

    result = await run([A])

    assert (result.outcome, run.sender.reads) == (Outcome.FAILED, [])


# -- the pure decisions ---------------------------------------------------------------


def test_a_message_that_came_twice_with_a_pending_record_is_finished_once() -> None:
    again = dataclasses.replace(A, event_id="catchup-a")

    division = divide([(A, Plan.RECONCILE), (again, Plan.RECONCILE), (B, Plan.WRITE)])

    assert [m.key for m, _ in division.finish] == [A.key]
    assert division.write == (B,)


def test_unrecorded_messages_are_written_unless_the_latest_has_a_pending_reply() -> None:
    assert divide([(A, Plan.WRITE), (B, Plan.SKIP_SENT)]).write == (A,)
    pending_latest = divide([(A, Plan.WRITE), (B, Plan.RECONCILE)])
    assert (pending_latest.write, pending_latest.cover) == ((), (A,))
    assert pending_latest.covered_by == B.key


def test_a_failed_reply_names_the_bursts_result_over_a_sent_one() -> None:
    sent, failed = BurstResult(Outcome.SENT, B.key, "<s@x>"), BurstResult(Outcome.FAILED, A.key)

    result = summarize([failed, sent], [])

    assert result == failed
    assert result.parts == (failed, sent)


def test_with_nothing_acted_on_the_latest_done_message_names_the_result() -> None:
    done = [BurstResult(Outcome.DECLINED, A.key), BurstResult(Outcome.ALREADY, B.key, "<r@x>")]

    assert summarize([], done) == done[-1]


async def test_a_late_message_the_pending_reply_never_saw_gets_a_reply_of_its_own() -> None:
    # the latest message's reply is pending (its send failed or the worker died); an
    # older message arrives late: it is not covered by a text written without it
    run = Run()
    late, latest = _inbound("<late@x>", 0), _inbound("<b@x>", 1)
    pending = owed(latest, ReplyState.PENDING, reply_text="written for b alone", covers=())
    await run.ledger.put(pending)

    await run([late, latest])

    assert run.writer.calls == [["<late@x>"]]
    assert run.ledger.records[late.key].state is ReplyState.SENT
    assert [r.reply_text for r in run.sender.sent] == ["written for b alone", "text for <late@x>"]


async def test_a_pending_reply_covers_the_messages_its_writer_saw() -> None:
    run = Run()
    seen, latest = _inbound("<a@x>", 0), _inbound("<b@x>", 1)
    pending = owed(latest, ReplyState.PENDING, reply_text="for a and b", covers=(seen.key,))
    await run.ledger.put(pending)

    await run([seen, latest])

    assert run.writer.calls == []
    assert run.ledger.records[seen.key].covered_by == latest.key


# F26: one message in two deliveries (its webhook and a catch-up's record, two event ids),
# both reaching one reply: answered as two, the writer saw the message twice, and where
# another writer's reply came first, the second copy was left unseen by it and answered
# anew: a second email with keys ignored (seed 954856068)
B_AGAIN = dataclasses.replace(B, event_id="catch-up-b")


async def test_a_message_twice_in_a_burst_is_answered_once() -> None:
    run = Run()
    theirs = owed(B, ReplyState.PENDING, reply_text="theirs", covers=(A.key,))

    async def came_first(record: ReplyRecord) -> Verdict:
        return Verdict(Ruling.ADOPT, theirs) if record.key == B.key else Verdict(Ruling.OWN, record)

    run.options["arbitrate"] = came_first

    await run([A, B, B_AGAIN])

    assert run.writer.calls == [["<a@x>", "<b@x>"]]
    assert [(r.key, r.reply_text) for r in run.sender.sent] == [(B.key, "theirs")]


async def test_a_newer_delivery_of_a_message_in_the_reply_is_not_taken_again() -> None:
    run = Run()
    deliveries = [[B_AGAIN, C]]

    async def newer() -> Sequence[Inbound]:
        return deliveries.pop() if deliveries else []

    run.options["newer"] = newer

    await run([A, B])

    assert run.writer.calls == [["<a@x>", "<b@x>"], ["<a@x>", "<b@x>", "<c@x>"]]
    assert [r.key for r in run.sender.sent] == [C.key]


# -- (F28) a draft left waiting beside the newer reply that covers its message ----------
# two late writers crossed: one's draft of A landed after the owner wrote B's reply
# covering A, and the owner's record superseding A's draft never stood


@pytest.mark.parametrize(
    "newer",
    [
        owed(B, ReplyState.AWAITING, reply_text="for a and b", covers=(A.key,)),
        owed(B, ReplyState.SENT, reply_text="for a and b", covers=(A.key,), sent_message_id="<r>"),
    ],
    ids=lambda record: record.state.value,
)
async def test_a_draft_the_latest_reply_covers_is_superseded_by_it(newer: ReplyRecord) -> None:
    run = Run()
    await run.ledger.put(owed(A, ReplyState.AWAITING, reply_text="for a"))
    await run.ledger.put(newer)

    await run([A, B])

    draft = run.ledger.records[A.key]
    assert (draft.state, draft.covered_by) == (ReplyState.COVERED, B.key)
    assert (run.writer.calls, run.sender.tried) == ([], [])


async def test_a_draft_whose_writer_saw_more_than_the_latest_reply_is_left_waiting() -> None:
    # covered by B, its older message C0 would be covered by a reply that never saw it
    run = Run()
    older = _inbound("<c0@x>", -1)
    await run.ledger.put(owed(A, ReplyState.AWAITING, reply_text="for a", covers=(older.key,)))
    await run.ledger.put(owed(B, ReplyState.AWAITING, reply_text="for a and b", covers=(A.key,)))

    await run([A, B])

    assert run.ledger.records[A.key].state is ReplyState.AWAITING


async def test_a_draft_of_a_message_the_latest_reply_does_not_cover_is_left_waiting() -> None:
    run = Run()
    await run.ledger.put(owed(A, ReplyState.AWAITING, reply_text="for a"))
    await run.ledger.put(owed(B, ReplyState.AWAITING, reply_text="for b", covers=()))

    await run([A, B])

    assert run.ledger.records[A.key].state is ReplyState.AWAITING

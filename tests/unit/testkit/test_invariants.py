"""testkit.invariants: the one checker of "once", each invariant caught when broken."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.approval import Approval, Verdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.invariants import (
    Decision,
    Email,
    Message,
    Observed,
    WriterCall,
    check,
    last_coverer,
)

A, B, C = (Message("inbox", m) for m in ("a", "b", "c"))
KA, KB, KC = (reply_key(*m.pair) for m in (A, B, C))


def _record(message: Message, state: ReplyState, **changes: object) -> ReplyRecord:
    record = ReplyRecord(
        key=reply_key(*message.pair),
        inbox_id=message.inbox_id,
        message_id=message.message_id,
        thread_key="t",
        state=state,
        created_at=datetime(2026, 12, 4, tzinfo=UTC),
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def _sent(message: Message, text: str = "hi", covers: tuple[str, ...] = ()) -> ReplyRecord:
    return _record(message, ReplyState.SENT, reply_text=text, covers=covers)


def _email(message: Message, text: str = "hi") -> Email:
    return Email(message.inbox_id, message.message_id, text)


def _world(**changes: object) -> Observed:
    """A, B and C answered once each."""
    base = Observed(
        messages=(A, B, C),
        emails=(_email(A), _email(B), _email(C)),
        ledger={KA: _sent(A), KB: _sent(B), KC: _sent(C)},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_run_that_answered_each_message_once_passes() -> None:
    verdict = check(_world())
    assert verdict.passed and verdict.count("answered") == 3


def test_a_message_with_no_outcome_is_missing_once_settled() -> None:
    verdict = check(_world(emails=(_email(A), _email(B)), ledger={KA: _sent(A), KB: _sent(B)}))
    assert [str(v) for v in verdict.violations] == [
        "answered_once: c in inbox: no email, no cover, no skip (no ledger record)"
    ]


def test_an_unsettled_run_counts_a_missing_message_but_breaks_nothing() -> None:
    world = _world(emails=(_email(A), _email(B)), ledger={KA: _sent(A), KB: _sent(B)})
    verdict = check(replace(world, settled=False))
    assert verdict.passed and verdict.outcomes[C.pair] == "missing"


def test_two_emails_for_one_message_are_doubled() -> None:
    verdict = check(_world(emails=(_email(A), _email(A), _email(B), _email(C))))
    assert [v.invariant for v in verdict.violations] == ["never_doubled"]


def test_an_email_for_a_forged_delivery_is_unverified() -> None:
    forged = Message("inbox", "c", verified=False)
    verdict = check(_world(messages=(A, B, forged)))
    assert [v.invariant for v in verdict.violations] == ["nothing_unverified"]


def test_a_forged_delivery_a_writer_saw_is_unverified_without_an_email_of_its_own() -> None:
    forged = Message("inbox", "c", verified=False)
    calls = (WriterCall(frozenset({KB, reply_key(*forged.pair)}), "text"),)
    ledger = {KA: _sent(A), KB: _sent(B, covers=(reply_key(*forged.pair),))}
    world = _world(messages=(A, B, forged), emails=(_email(A), _email(B)), ledger=ledger)
    world = replace(world, writer_calls=calls)
    verdict = check(world)
    assert [v.invariant for v in verdict.violations] == ["nothing_unverified"]


def test_a_message_covered_by_a_reply_whose_writer_saw_it_is_covered() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _sent(B, covers=(KA,)),
        KC: _sent(C),
    }
    verdict = check(_world(emails=(_email(B), _email(C)), ledger=ledger))
    assert verdict.passed and verdict.outcomes[A.pair] == "covered"


def test_a_cover_whose_writer_never_saw_the_message_is_caught() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _sent(B, covers=()),
        KC: _sent(C),
    }
    verdict = check(_world(emails=(_email(B), _email(C)), ledger=ledger))
    assert [v.invariant for v in verdict.violations] == ["covered_unseen"]


def test_writer_calls_decide_what_the_writer_saw_where_the_run_kept_them() -> None:
    """The ledger claims B's reply covers A; the model's own record says the call that wrote
    B's email saw only B."""
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _sent(B, covers=(KA,)),
        KC: _sent(C),
    }
    calls = (WriterCall(frozenset({KB}), "hi"), WriterCall(frozenset({KA, KB}), "other"))
    world = _world(emails=(_email(B), _email(C)), ledger=ledger, writer_calls=calls)
    assert [v.invariant for v in check(world).violations] == ["covered_unseen"]


def test_a_cover_whose_coverer_sent_nothing_is_missing() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _record(B, ReplyState.PENDING, covers=(KA,)),
        KC: _sent(C),
    }
    verdict = check(_world(emails=(_email(C),), ledger=ledger))
    assert {v.subject for v in verdict.of("answered_once")} == {"a in inbox", "b in inbox"}


def test_a_chain_of_covers_ends_at_the_reply_that_was_sent() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _record(B, ReplyState.COVERED, covered_by=KC),
        KC: _sent(C, covers=(KA, KB)),
    }
    assert last_coverer(ledger, KB) == KC
    assert check(_world(emails=(_email(C),), ledger=ledger)).passed


def test_a_decline_needs_its_reason() -> None:
    ledger = {KA: _record(A, ReplyState.DECLINED, reason="unsubscribe"), KB: _sent(B), KC: _sent(C)}
    assert check(_world(emails=(_email(B), _email(C)), ledger=ledger)).passed
    ledger[KA] = _record(A, ReplyState.DECLINED)
    verdict = check(_world(emails=(_email(B), _email(C)), ledger=ledger))
    assert [str(v) for v in verdict.violations] == [
        "answered_once: a in inbox: declined without a reason"
    ]


def test_a_skip_or_an_open_dead_letter_is_an_outcome() -> None:
    world = _world(
        emails=(_email(C),),
        ledger={KC: _sent(C)},
        skipped={A.pair: "duplicate"},
        dead_lettered={B.pair: "writer_failed"},
    )
    verdict = check(world)
    assert verdict.passed
    assert (verdict.outcomes[A.pair], verdict.outcomes[B.pair]) == ("skipped", "dead-lettered")


def test_a_draft_sent_with_no_approval_is_caught() -> None:
    verdict = check(_world(drafts=frozenset({KA})))
    assert [str(v) for v in verdict.violations] == [
        f"draft_approved: {KA}: a draft sent with no approval"
    ]


def test_an_approved_draft_sent_with_its_text_passes() -> None:
    world = _world(drafts=frozenset({KA}), decisions=(Decision(KA, "approve", "hi"),))
    assert check(world).passed


def test_a_draft_sent_with_a_text_nobody_approved_is_caught() -> None:
    world = _world(drafts=frozenset({KA}), decisions=(Decision(KA, "edit", "edited"),))
    assert [v.detail for v in check(world).violations] == ["sent with a text no approval gave"]


def test_a_draft_sent_after_its_rejection_applied_is_caught() -> None:
    decisions = (Decision(KA, "approve", "hi"), Decision(KA, "reject", applied=True))
    world = _world(drafts=frozenset({KA}), decisions=decisions)
    assert "a draft sent after its rejection was applied" in [
        v.detail for v in check(world).violations
    ]


def test_a_message_covered_by_a_rejected_draft_owes_no_email() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _record(B, ReplyState.DECLINED, reason="rejected"),
        KC: _sent(C),
    }
    world = _world(
        emails=(_email(C),),
        ledger=ledger,
        drafts=frozenset({KB}),
        decisions=(Decision(KB, "reject", applied=True),),
    )
    assert check(world).passed


def test_a_message_covered_by_a_failed_reply_is_dead_lettered_with_it() -> None:
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: _record(B, ReplyState.FAILED, error="503"),
        KC: _sent(C),
    }
    letters = {A.pair: "retryable after 5 attempt(s)", B.pair: "retryable after 5 attempt(s)"}
    world = _world(emails=(_email(C),), ledger=ledger, dead_lettered=letters)
    assert check(world).passed
    unlettered = _world(emails=(_email(C),), ledger=ledger, dead_lettered={C.pair: "503"})
    assert "covered by" in str(check(unlettered).violations)
    raced = _world(emails=(_email(C),), ledger=ledger, dead_lettered={B.pair: "retry_raced"})
    assert "covered by" in str(check(raced).violations)  # its retry runs nothing again


def test_a_ledger_that_says_sent_without_an_email_disagrees_with_the_mail_api() -> None:
    world = _world(emails=(_email(A), _email(B)), skipped={C.pair: "duplicate"})
    assert [str(v) for v in check(world).violations] == [
        f"ledger_agrees: {KC}: recorded sent, no email"
    ]


def test_an_email_whose_ledger_record_is_still_pending_disagrees_once_settled() -> None:
    ledger = {KA: _record(A, ReplyState.PENDING, reply_text="hi"), KB: _sent(B), KC: _sent(C)}
    assert [v.invariant for v in check(_world(ledger=ledger)).violations] == ["ledger_agrees"]
    assert check(replace(_world(ledger=ledger), settled=False)).passed


def test_an_approved_draft_sent_after_a_newer_reply_covering_it_superseded_it_is_caught() -> None:
    # A's draft was superseded by B's reply, which covers A; A's draft was approved all the same
    approved = Approval(Verdict.APPROVED, "ann", datetime(2026, 12, 4, tzinfo=UTC), "d1")
    ledger = {KA: replace(_sent(A), approval=approved), KB: _sent(B, covers=(KA,)), KC: _sent(C)}
    verdict = check(_world(ledger=ledger))
    assert [str(v) for v in verdict.violations] == [
        f"draft_approved: {KA}: sent, and the newer reply {KB} covers it (superseded)"
    ]
    # no approval: A's own reply (a paused worker's, finished by the next owner: F10)
    assert check(_world(ledger={KA: _sent(A), KB: _sent(B, covers=(KA,)), KC: _sent(C)})).passed


def test_an_edited_cover_is_judged_by_the_text_its_writer_wrote() -> None:
    edited = Approval(Verdict.EDITED, "ann", datetime(2026, 12, 4, tzinfo=UTC), "d1", "hi")
    ledger = {
        KA: _record(A, ReplyState.COVERED, covered_by=KB),
        KB: replace(_sent(B, text="edited", covers=(KA,)), approval=edited),
        KC: _sent(C),
    }
    calls = (WriterCall(frozenset({KA, KB}), "hi"),)
    emails = (_email(B, "edited"), _email(C))
    world = _world(emails=emails, ledger=ledger, writer_calls=calls)
    assert check(world).passed
    unedited = replace(world, ledger={**ledger, KB: _sent(B, text="edited", covers=(KA,))})
    assert [v.invariant for v in check(unedited).violations] == ["covered_unseen"]


def test_a_message_covered_by_a_reply_never_recorded_is_dead_lettered_with_it() -> None:
    # B's burst superseded A's draft; its writer failed before B's reply was recorded
    ledger = {KA: _record(A, ReplyState.COVERED, covered_by=KB), KC: _sent(C)}
    letters = {A.pair: "writer_failed", B.pair: "writer_failed"}
    world = _world(emails=(_email(C),), ledger=ledger, dead_lettered=letters)
    assert check(world).passed
    unlettered = replace(world, dead_lettered={C.pair: "writer_failed"})
    assert "which no message of the run has" in str(check(unlettered).violations)


def test_a_message_covered_by_a_reply_never_recorded_is_held_by_that_replys_letter() -> None:
    # F43: B's burst, its thread unread, was dead-lettered; A's draft, marked superseded by
    # B, is recalled by the letter's retry, which reads the thread
    ledger = {KA: _record(A, ReplyState.COVERED, covered_by=KB), KC: _sent(C)}
    world = _world(emails=(_email(C),), ledger=ledger, dead_lettered={B.pair: "record_failed"})
    verdict = check(world)
    assert verdict.passed and verdict.count("dead-lettered") == 2
    raced = replace(world, dead_lettered={B.pair: "retry_raced"})
    assert "which no message of the run has" in str(check(raced).violations)


def test_a_message_covered_by_a_failed_send_is_held_by_the_letter_of_its_message_alone() -> None:
    # F50: B's send failed (text recorded) covering A; a retry could not read B and
    # dead-lettered B alone (fetch_failed), A's event ran as covered: B's next retry sends
    # the recorded text, which answers A
    failed = _record(B, ReplyState.FAILED, reply_text="for a and b", covers=(KA, KB))
    ledger = {KA: _record(A, ReplyState.COVERED, covered_by=KB), KB: failed, KC: _sent(C)}
    world = _world(emails=(_email(C),), ledger=ledger, dead_lettered={B.pair: "fetch_failed"})
    verdict = check(world)
    assert verdict.passed and verdict.count("dead-lettered") == 2
    unwritten = replace(world, ledger={**ledger, KB: replace(failed, reply_text=None)})
    assert "which has no email" in str(check(unwritten).violations)  # its retry writes anew
    raced = replace(world, dead_lettered={B.pair: "retry_raced"})
    assert "which has no email" in str(check(raced).violations)  # its retry runs nothing


def test_a_send_failed_letter_of_the_covering_replys_message_alone_holds_what_it_covers() -> None:
    # F51's order: the covered message was recorded covered only after the send failed
    failed = _record(B, ReplyState.FAILED, reply_text="for a and b", covers=(KA, KB))
    ledger = {KA: _record(A, ReplyState.COVERED, covered_by=KB), KB: failed, KC: _sent(C)}
    world = _world(emails=(_email(C),), ledger=ledger, dead_lettered={B.pair: "send_failed"})
    assert check(world).passed
    waiting = replace(world, ledger={**ledger, KB: replace(failed, state=ReplyState.AWAITING)})
    assert "which has no email" in str(check(waiting).violations)  # a draft: no send to retry


def test_a_cover_is_held_by_any_letter_whose_retry_runs_the_covering_message_again() -> None:
    # F53: B's burst (its thread unread) marked A's draft superseded and was dead-lettered;
    # the letter's retry raced a held delivery of B's event, which then ended failed: the
    # retry_raced letter's retry runs B's burst again, which recalls A
    ledger = {KA: _record(A, ReplyState.COVERED, covered_by=KB), KC: _sent(C)}
    raced = _world(emails=(_email(C),), ledger=ledger, dead_lettered={B.pair: "retry_raced"})
    assert "which no message of the run has" in str(check(raced).violations)
    assert check(replace(raced, rerun=frozenset({B.pair}))).passed


def test_more_writer_calls_in_sixty_seconds_than_the_rpm_is_over_the_rate() -> None:
    starts = [i * 0.98 for i in range(61)]  # 61 calls within 58.8 s
    broken = check(Observed((), (), {}, writer_starts=starts, rpm=60)).of("within_rate")
    assert [v.subject for v in broken] == ["the group"]
    assert "61 writer calls started in the 60 s from 0.000 s" in broken[0].detail


def test_the_rpm_calls_in_any_sixty_seconds_are_within_the_rate() -> None:
    starts = [i * 1.0 for i in range(120)]  # a window is half-open: 0 and 60 not together
    assert check(Observed((), (), {}, writer_starts=starts, rpm=60)).passed
    assert check(Observed((), (), {}, writer_starts=starts)).passed  # no rpm: no limit

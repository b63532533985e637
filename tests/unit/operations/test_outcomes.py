"""What `python -m devstack send` says of each delivery, from ingest's answers and the ledger."""

from __future__ import annotations

from datetime import UTC, datetime

from onceonly.operations.outcomes import (
    Sent,
    outcomes,
    outcomes_known,
    waiting_for,
    worker_verdicts,
)
from onceonly.schemas.ledger import ReplyRecord, ReplyState

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _record(message_id: str, state: ReplyState, **changes: object) -> ReplyRecord:
    return ReplyRecord(
        key=f"reply-{message_id}",
        inbox_id="in@agentmail.to",
        message_id=message_id,
        thread_key="agentmail:t",
        state=state,
        created_at=AT,
        **changes,  # type: ignore[arg-type]
    )


def _sent(label: str, event: str, message: str | None, status: int = 204) -> Sent:
    return Sent(label, status, "", event, message)


def test_a_sent_reply_is_reported_with_its_text() -> None:
    record = _record("m1", ReplyState.SENT, reply_text="Hello", sent_message_id="<s1>")

    [outcome] = outcomes([_sent("A", "e1", "m1")], {"m1": record}, dry_run=True)

    assert outcome.verdict == "answered in the dry-run outbox (<s1>)"
    assert outcome.reply_text == "Hello"


def test_a_later_delivery_of_the_same_event_is_a_duplicate_of_the_first() -> None:
    record = _record("m1", ReplyState.SENT, reply_text="Hello")
    sent = [_sent("A, delivery 1", "e1", "m1"), _sent("A, delivery 2", "e1", "m1")]

    second = outcomes(sent, {"m1": record}, dry_run=False)[1]

    assert second.verdict == "skipped as a duplicate of A, delivery 1 (event e1)"
    assert second.reply_text is None


def test_a_refused_delivery_is_not_the_first_of_its_event() -> None:
    sent = [_sent("A1", "e1", "m1", status=503), _sent("A2", "e1", "m1")]

    verdicts = [o.verdict for o in outcomes(sent, {}, dry_run=False)]

    assert verdicts[0].startswith("refused by ingest: HTTP 503")
    assert not verdicts[1].startswith("skipped as a duplicate")


def test_a_covered_message_names_the_delivery_whose_reply_covers_it() -> None:
    replies = {
        "mB": _record("mB", ReplyState.SENT, reply_text="Hi"),
        "mA": _record("mA", ReplyState.COVERED, covered_by="reply-mB"),
    }
    sent = [_sent("message B", "eB", "mB"), _sent("message A", "eA", "mA")]

    verdict = outcomes(sent, replies, dry_run=False)[1].verdict

    assert verdict == "answered by the reply to message B"


def test_a_declined_message_says_the_writer_declined_and_why() -> None:
    record = _record("m1", ReplyState.DECLINED, reason="spam")

    [outcome] = outcomes([_sent("A", "e1", "m1")], {"m1": record}, dry_run=False)

    assert outcome.verdict == "not answered: the writer declined (spam)"


def test_an_event_that_is_no_message_is_reported_delivered() -> None:
    [outcome] = outcomes([_sent("stripe", "evt_1", None)], {}, dry_run=False)

    assert outcome.verdict == "delivered (event evt_1); not a message"


def test_a_pending_record_is_still_waited_for() -> None:
    replies = {"m1": _record("m1", ReplyState.PENDING)}

    assert waiting_for([_sent("A", "e1", "m1")], replies) == {"m1"}


def test_a_refused_delivery_is_not_waited_for() -> None:
    assert waiting_for([_sent("A", "e1", "m1", status=401)], {}) == set()


def test_the_worker_verdicts_of_an_event_are_in_topic_order() -> None:
    found = {"e1": [(0, 9, "skipped: duplicate"), (0, 4, "processed")]}

    assert worker_verdicts(found) == {"e1": ["processed", "skipped: duplicate"]}


def test_each_accepted_delivery_gets_the_workers_word_for_its_own_record() -> None:
    sent = [_sent("A1", "e1", "m1"), _sent("A2", "e1", "m1")]
    seen = {"e1": ["processed", "skipped: duplicate"]}

    second = outcomes(sent, {}, dry_run=False, seen=seen)[1]

    assert second.verdict.endswith("[worker: skipped: duplicate]")


def test_a_refused_delivery_takes_no_record_of_the_event() -> None:
    sent = [_sent("A1", "e1", "m1", status=503), _sent("A2", "e1", "m1")]
    seen = {"e1": ["processed"]}

    verdicts = [o.verdict for o in outcomes(sent, {}, dry_run=False, seen=seen)]

    assert "[worker:" not in verdicts[0] and verdicts[1].endswith("[worker: processed]")


STORY = [_sent("B", "e2", "m2"), _sent("A1", "e1", "m1"), _sent("A2", "e1", "m1")]
SETTLED_REPLIES = {
    "m2": _record("m2", ReplyState.SENT),
    "m1": _record("m1", ReplyState.COVERED, covered_by="reply-m2"),
}
FINAL_WORDS = {"e2": ["processed"], "e1": ["processed", "skipped: duplicate"]}


def test_outcomes_are_known_once_every_reply_settled_and_every_delivery_has_a_final_word() -> None:
    assert outcomes_known(STORY, SETTLED_REPLIES, FINAL_WORDS)


def test_a_reply_still_pending_is_not_an_outcome() -> None:
    replies = {**SETTLED_REPLIES, "m2": _record("m2", ReplyState.PENDING)}

    assert not outcomes_known(STORY, replies, FINAL_WORDS)


def test_a_message_with_no_ledger_record_is_not_an_outcome() -> None:
    assert not outcomes_known(STORY, {"m2": SETTLED_REPLIES["m2"]}, FINAL_WORDS)


def test_a_delivery_the_worker_has_not_finished_is_not_an_outcome() -> None:
    for unfinished in ("in progress", "not processed yet"):
        words = {**FINAL_WORDS, "e2": [unfinished]}

        assert not outcomes_known(STORY, SETTLED_REPLIES, words), unfinished


def test_a_delivery_with_no_word_yet_is_not_an_outcome() -> None:
    words = {**FINAL_WORDS, "e1": ["processed"]}  # the retry's record not read yet

    assert not outcomes_known(STORY, SETTLED_REPLIES, words)


def test_a_refused_delivery_is_known_at_once() -> None:
    assert outcomes_known([_sent("A", "e1", "m1", status=401)], {}, {})

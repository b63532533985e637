"""Reply-once decisions, and reply_once against a local AgentMail server via the real SDK."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
import structlog

from onceonly.processors.exceptions import Rebalancing, SendError, SendFailure, WriterFailed
from onceonly.processors.mail.agentmail.messages import find_sent_reply, skip_reason
from onceonly.processors.mail.agentmail.sender import AgentMailSender
from onceonly.processors.reply.arbitration import Ruling, Verdict
from onceonly.processors.reply.once import (
    BurstResult,
    Outcome,
    Plan,
    ReplyParts,
    SendPolicy,
    Skip,
    plan,
    reply_once,
    simple_write,
    split_burst,
)
from onceonly.processors.reply.sending import _retrying, give_up
from onceonly.processors.writer.contract import Decline, Inbound, Text, reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState, Usage
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.ledger import MemoryLedger
from tests._mail import seed_agents_message
from tests.unit.processors._messages import INBOX, T0, owed, received
from tests.unit.processors._replying import StubSender, reply_parts


def _inbound(message_id: str, *, minute: int = 0, thread: str = "thr_1", **kw: Any) -> Inbound:
    return received(message_id, T0 + timedelta(minutes=minute), thread=thread, **kw)


# -- pure decisions ------------------------------------------------------------------


def test_the_key_is_reply_dash_sha256_of_inbox_newline_message() -> None:
    key = reply_key(INBOX, "<a/b@mail.gmail.com>")

    assert key == reply_key(INBOX, "<a/b@mail.gmail.com>")
    assert re.fullmatch(r"reply-[0-9a-f]{64}", key)
    assert key != reply_key("other@agentmail.to", "<a/b@mail.gmail.com>")


def test_the_agents_own_message_is_skipped() -> None:
    own = _inbound("<m1@x>", sender=f"Support <{INBOX}>")

    assert skip_reason("message.received", own) is Skip.OWN_MESSAGE


def test_spam_is_not_answered() -> None:
    assert skip_reason("message.received.spam", _inbound("<m1@x>")) is Skip.NOT_REAL_MAIL


def test_other_event_types_are_not_answered() -> None:
    assert skip_reason("message.delivered", _inbound("<m1@x>")) is Skip.NOT_RECEIVED


def test_a_customer_message_is_answered() -> None:
    assert skip_reason("message.received", _inbound("<m1@x>")) is None


def _record(state: ReplyState, created: datetime = T0) -> ReplyRecord:
    return ReplyRecord("k", INBOX, "<m1@x>", "agentmail:thr_1", state, created, "hi")


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, Plan.WRITE),
        (_record(ReplyState.SENT), Plan.SKIP_SENT),
        (_record(ReplyState.COVERED), Plan.SKIP_COVERED),
        (_record(ReplyState.FAILED), Plan.SKIP_SEND_FAILED),  # its text recorded
        (replace(_record(ReplyState.FAILED), reply_text=None), Plan.SKIP_FAILED),
        (_record(ReplyState.PENDING), Plan.RECONCILE),
        (_record(ReplyState.PENDING, T0 - timedelta(hours=25)), Plan.RECONCILE),
    ],
)
def test_the_plan_follows_the_ledger_record(record: ReplyRecord | None, expected: Plan) -> None:
    assert plan(record) is expected


def test_a_burst_answers_its_latest_message() -> None:
    burst = [_inbound("<b@x>", minute=2), _inbound("<c@x>", minute=3), _inbound("<a@x>")]

    target, covered = split_burst(burst)

    assert target.message_id == "<c@x>"
    assert [m.message_id for m in covered] == ["<a@x>", "<b@x>"]


def test_a_sent_reply_is_found_by_its_in_reply_to() -> None:
    thread = [
        {"message_id": "<m1@x>", "labels": ["received"]},
        {"message_id": "<r1@x>", "labels": ["sent"], "in_reply_to": "<m1@x>"},
    ]

    assert find_sent_reply(thread, "<m1@x>") == "<r1@x>"
    assert find_sent_reply(thread, "<m2@x>") is None


def _pending(message: Inbound, text: str) -> ReplyRecord:
    """A *pending* record of ``message`` (``<m1@x>``), recorded at T0 with ``text``."""
    return ReplyRecord(
        message.key, INBOX, "<m1@x>", message.thread_key, ReplyState.PENDING, T0, text
    )


# -- reply_once against the local AgentMail server ---------------------------------------


@dataclass
class CountingWriter:
    calls: list[int] = field(default_factory=list)

    def __call__(self, burst: Sequence[Inbound]) -> str:
        self.calls.append(len(burst))
        return f"Thanks, we got your {len(burst)} message(s)."


def _seed(mail: FakeAgentMail, message_id: str, *, thread: str = "thr_1") -> Inbound:
    mail.seed_message(INBOX, message_id=message_id, thread_id=thread)
    return _inbound(message_id, thread=thread)


class Harness:
    def __init__(self, mail: FakeAgentMail, now: datetime = T0) -> None:
        self.ledger = MemoryLedger()
        self.writer = CountingWriter()
        self.sender = AgentMailSender("test-key", base_url=mail.base_url, timeout_s=5)
        self.dead: list[tuple[ReplyRecord, str]] = []
        self.now = now

    async def dead_letter(self, record: ReplyRecord, reason: str, burst: Any = ()) -> None:
        self.dead.append((record, reason))

    async def run(
        self,
        burst: Sequence[Inbound],
        attempts: int = 3,
        may_retry: bool = True,
        in_flight_wait_s: float = 60.0,
    ) -> BurstResult:
        policy = SendPolicy(attempts, 0.01, 0.05, in_flight_wait_s)
        parts = self.parts(simple_write(self.writer), policy=policy, may_retry=lambda: may_retry)
        return await reply_once(burst, parts)

    def parts(self, write: Any, **options: Any) -> ReplyParts:
        """The harness's ledger, sender, dead letters and clock, with ``write`` and ``options``."""
        given = {"ledger": self.ledger, "sender": self.sender, "dead_letter": self.dead_letter}
        return ReplyParts(**given | {"write": write, "now": lambda: self.now} | options)


def _with_message(mail: FakeAgentMail, now: datetime = T0) -> tuple[Harness, Inbound]:
    """A harness at ``now``, and a customer's message ``<m1@x>`` seeded in ``mail``."""
    message = _seed(mail, "<m1@x>")
    return Harness(mail, now=now), message


def _owed_since(
    mail: FakeAgentMail, since: timedelta, text: str
) -> tuple[Harness, Inbound, ReplyRecord]:
    """A harness ``since`` after :data:`T0`; ``<m1@x>`` seeded in ``mail``, and the pending
    record of its reply with ``text`` recorded at T0 (not yet in the ledger)."""
    harness, message = _with_message(mail, T0 + since)
    return harness, message, _pending(message, text)


async def test_a_message_is_answered_once_however_often_it_comes(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)

    results = [await harness.run([message]) for _ in range(3)]

    assert [r.outcome for r in results] == [Outcome.SENT, Outcome.ALREADY, Outcome.ALREADY]
    assert len(mail.outbox) == 1
    assert mail.outbox[0].idempotency_key == message.key
    assert harness.writer.calls == [1]


async def test_the_pending_record_is_acknowledged_before_the_send(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)

    await harness.run([message])

    states = [w.state for w in harness.ledger.writes]
    assert states == [ReplyState.PENDING, ReplyState.SENT]


async def test_a_crash_after_the_ledger_write_resends_the_stored_text(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)
    stored = _pending(message, "stored text")
    await harness.ledger.put(stored)

    result = await harness.run([message])

    assert result.outcome is Outcome.SENT
    assert [e.text for e in mail.outbox] == ["stored text"]
    assert harness.writer.calls == []


async def test_a_lost_response_is_retried_with_the_same_key_and_sends_once(
    mail: FakeAgentMail,
) -> None:
    harness, message = _with_message(mail)
    mail.lose_response_next(1)

    result = await harness.run([message])

    assert result.outcome is Outcome.SENT
    assert len(mail.outbox) == 1


async def _restarted_during_own_send(
    mail: FakeAgentMail, send_s: float
) -> tuple[Inbound, Harness, asyncio.Task[BurstResult]]:
    """A pending reply both harnesses hold, the first one's send of it running (``send_s``
    long on the mail API, its key held): the message, the restarted harness, that send."""
    message = _seed(mail, "<m1@x>")
    first, restarted = Harness(mail), Harness(mail)
    for harness in (first, restarted):
        await harness.ledger.put(_pending(message, "stored text"))
    mail.faults.send_delay_s = send_s
    in_flight = asyncio.create_task(first.run([message]))
    while not mail.keys_in_flight():  # the first send holds the key
        await asyncio.sleep(0.01)
    return message, restarted, in_flight


async def test_a_send_meeting_its_own_first_send_in_flight_waits_for_it_past_the_attempts(
    mail: FakeAgentMail,
) -> None:
    # a worker restarted while its own send was still running on the mail API: the
    # stored text goes again with its key, meets 409 "in flight" for longer than the
    # attempts last, and must wait for that first send rather than dead-letter a reply sent
    message, restarted, in_flight = await _restarted_during_own_send(mail, send_s=1.0)

    result = await restarted.run([message], attempts=2, in_flight_wait_s=20.0)

    [email] = mail.outbox
    assert (result.outcome, result.sent_message_id) == (Outcome.SENT, email.sent_message_id)
    assert restarted.dead == []
    assert (await in_flight).outcome is Outcome.SENT


async def test_a_first_send_in_flight_past_the_wait_dead_letters_saying_so(
    mail: FakeAgentMail,
) -> None:
    message, restarted, in_flight = await _restarted_during_own_send(mail, send_s=2.0)

    result = await restarted.run([message], attempts=50, in_flight_wait_s=0.3)

    assert result.outcome is Outcome.FAILED
    [(record, reason)] = restarted.dead
    assert reason.startswith("in_flight after ") and "in flight" in reason
    assert record.attempts < 50  # the wait ended it, not the attempts
    await in_flight


async def test_a_key_used_with_other_content_whose_reply_is_in_the_thread_is_recorded_sent(
    mail: FakeAgentMail,
) -> None:
    # another owner sent this key with its own text: the 409 is that email, not a failure
    harness, message = _with_message(mail)
    other = Harness(mail)
    other.writer = lambda burst: "a different text"  # type: ignore[assignment]
    await other.run([message])

    result = await harness.run([message])

    [email] = mail.outbox
    assert result == BurstResult(Outcome.ALREADY, message.key, email.sent_message_id)
    assert harness.dead == []
    record = harness.ledger.records[message.key]
    assert (record.state, record.sent_message_id) == (ReplyState.SENT, email.sent_message_id)


async def test_server_errors_exhaust_the_attempts_then_dead_letter(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)
    mail.fail_next(10, status=503)

    result = await harness.run([message], attempts=3)

    assert result.outcome is Outcome.FAILED
    assert mail.outbox == []
    [(record, reason)] = harness.dead
    assert record.attempts == 3 and "after 3 attempt(s)" in reason


async def test_answers_lost_on_every_attempt_read_the_thread_and_record_the_email_sent(
    mail: FakeAgentMail,
) -> None:
    # found by the simulator (F5; seeds 204, 245, 1047): each answer lost after the email
    # went out; the reply was recorded failed and dead-lettered while the customer had it
    harness, message = _with_message(mail)
    mail.lose_response_next(10)

    result = await harness.run([message], attempts=3)

    [email] = mail.outbox
    assert result == BurstResult(Outcome.ALREADY, message.key, email.sent_message_id)
    assert harness.dead == []
    record = harness.ledger.records[message.key]
    assert (record.state, record.sent_message_id) == (ReplyState.SENT, email.sent_message_id)


class FailingSender:
    """A sender whose sends and thread reads all fail retryably."""

    async def reply(self, record: ReplyRecord) -> str:
        raise SendError(SendFailure.RETRY, "503 from the mail API")

    async def find_reply(self, record: ReplyRecord) -> str | None:
        raise SendError(SendFailure.RETRY, "thread read timed out")


async def test_a_thread_unreadable_after_the_failed_send_leaves_the_reply_failed() -> None:
    harness = Harness.__new__(Harness)
    harness.ledger, harness.writer, harness.dead, harness.now = (
        MemoryLedger(),
        CountingWriter(),
        [],
        T0,
    )
    harness.sender = FailingSender()  # type: ignore[assignment]
    message = _inbound("<m1@x>")

    result = await harness.run([message], attempts=2)

    assert result.outcome is Outcome.FAILED
    [(record, reason)] = harness.dead
    assert record.state is ReplyState.FAILED and "after 2 attempt(s)" in reason


async def test_a_stale_pending_record_whose_reply_is_in_the_thread_sends_nothing(
    mail: FakeAgentMail,
) -> None:
    harness, message, pending = _owed_since(mail, timedelta(hours=25), "t")
    seed_agents_message(mail, INBOX, "<r1@x>", "thr_1", in_reply_to="<m1@x>")
    await harness.ledger.put(pending)

    result = await harness.run([message])

    assert result.outcome is Outcome.ALREADY
    assert mail.outbox == []
    assert harness.ledger.records[message.key].state is ReplyState.SENT
    assert harness.ledger.records[message.key].sent_message_id == "<r1@x>"


async def test_a_burst_of_three_gets_one_reply_and_covers_the_others(mail: FakeAgentMail) -> None:
    harness = Harness(mail)
    burst = [_seed(mail, f"<m{i}@x>") for i in range(3)]
    burst = [_inbound(m.message_id, minute=i) for i, m in enumerate(burst)]

    await harness.run(burst)
    replay = await harness.run(burst[:1])

    assert [e.replied_to_message_id for e in mail.outbox] == ["<m2@x>"]
    assert harness.writer.calls == [3]
    assert harness.ledger.records[burst[0].key].state is ReplyState.COVERED
    assert harness.ledger.records[burst[0].key].covered_by == burst[2].key
    assert replay.outcome is Outcome.ALREADY


async def test_a_message_id_with_a_slash_reaches_the_right_url(mail: FakeAgentMail) -> None:
    harness = Harness(mail)
    message = _seed(mail, "<CAJ+ab/cd==@mail.gmail.com>")

    result = await harness.run([message])

    assert result.outcome is Outcome.SENT
    assert mail.outbox[0].replied_to_message_id == "<CAJ+ab/cd==@mail.gmail.com>"


async def test_a_failed_thread_read_is_retried_and_never_becomes_a_blind_send() -> None:
    ledger = MemoryLedger()
    message = _inbound("<m1@x>")
    stale = _pending(message, "t")
    await ledger.put(stale)
    timed_out = SendError(SendFailure.RETRY, "thread read timed out")
    sender = StubSender(found="<r1@x>", read_failures=[timed_out])

    async def dead_letter(record: ReplyRecord, reason: str, burst: Any = ()) -> None:
        raise AssertionError(reason)

    later = T0 + timedelta(hours=25)
    result = await _reply([message], ledger, sender, dead_letter=dead_letter, now=lambda: later)

    assert result.outcome is Outcome.ALREADY
    assert (len(sender.reads), len(sender.sent)) == (2, 0)
    assert ledger.records[message.key].sent_message_id == "<r1@x>"


async def test_a_rebalance_stops_the_retries_and_leaves_the_reply_pending(
    mail: FakeAgentMail,
) -> None:
    harness, message = _with_message(mail)
    mail.fail_next(1, status=503)

    with pytest.raises(Rebalancing, match="rebalance"):
        await harness.run([message], may_retry=False)

    assert [w.state for w in harness.ledger.writes] == [ReplyState.PENDING]
    assert harness.dead == []
    assert mail.outbox == []


async def test_a_rebalance_does_not_stop_a_first_attempt(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)

    result = await harness.run([message], may_retry=False)

    assert result.outcome is Outcome.SENT
    assert len(mail.outbox) == 1


def test_a_message_labelled_sent_is_the_agents_own_whoever_it_is_from() -> None:
    own = _inbound("<m1@x>", sender="Someone Else <else@example.com>", labels=("sent",))

    assert skip_reason("message.received", own) is Skip.OWN_MESSAGE


def test_a_declined_record_is_never_written_again_even_on_a_replay() -> None:
    declined = ReplyRecord("k", INBOX, "<m@x>", "agentmail:t", ReplyState.DECLINED, T0)

    assert plan(declined, replay=True) is Plan.SKIP_DECLINED


def test_a_replay_of_a_failed_writer_asks_the_writer_again() -> None:
    failed = ReplyRecord("k", INBOX, "<m@x>", "agentmail:t", ReplyState.FAILED, T0)

    assert plan(failed, replay=True) is Plan.WRITE


class _Ordered(MemoryLedger):
    """A ledger and a sender that note, in one list, every write and every send."""

    def __init__(self, sender: Any, log: list[str]) -> None:
        super().__init__()
        self.sender, self.log = sender, log

    async def put(self, record: ReplyRecord) -> None:
        self.log.append(f"ledger {record.state.value}")
        await super().put(record)

    async def reply(self, record: ReplyRecord) -> str:
        self.log.append("send")
        return str(await self.sender.reply(record))

    async def find_reply(self, record: ReplyRecord) -> str | None:
        return await self.sender.find_reply(record)  # type: ignore[no-any-return]


async def test_the_pending_record_is_written_before_any_send_attempt(mail: FakeAgentMail) -> None:
    harness = Harness(mail)
    mail.fail_next(2, status=503)  # three send attempts
    log: list[str] = []
    ordered = _Ordered(harness.sender, log)
    harness.ledger = ordered
    harness.sender = ordered  # type: ignore[assignment]

    await harness.run([_seed(mail, "<m1@x>")])

    assert log == ["ledger pending", "send", "send", "send", "ledger sent"]


async def test_a_writer_that_fails_records_failed_and_dead_letters_the_burst(
    mail: FakeAgentMail,
) -> None:
    harness, message = _with_message(mail)

    async def failing(burst: Sequence[Inbound]) -> str:
        raise WriterFailed("the writer failed", attempts=3, last_error="RuntimeError('429')")

    result = await reply_once(
        [message],
        harness.parts(failing),
    )

    assert result.outcome is Outcome.FAILED
    assert harness.ledger.records[message.key].state is ReplyState.FAILED
    assert harness.dead[0][1].startswith("writer_failed after 3 attempt(s)")
    assert mail.outbox == []


async def test_a_declined_reply_is_recorded_and_nothing_is_sent(mail: FakeAgentMail) -> None:
    harness, message = _with_message(mail)

    result = await reply_once(
        [message],
        harness.parts(simple_write(lambda burst: Decline("out of office"))),
    )

    assert result.outcome is Outcome.DECLINED
    record = harness.ledger.records[message.key]
    assert (record.state, record.reason) == (ReplyState.DECLINED, "out of office")
    assert mail.outbox == []


async def test_newer_messages_supersede_the_text_and_get_the_one_reply(mail: FakeAgentMail) -> None:
    harness = Harness(mail)
    first, second = _seed(mail, "<a@x>"), _seed(mail, "<b@x>")
    second = _inbound("<b@x>", minute=1)
    seen: list[list[str]] = []
    arrivals = [[second], []]

    def writer(burst: Sequence[Inbound]) -> str:
        seen.append([m.message_id for m in burst])
        return f"reply covering {len(burst)}"

    async def newer() -> list[Inbound]:
        return arrivals.pop(0) if arrivals else []

    result = await reply_once(
        [first],
        harness.parts(simple_write(writer), newer=newer),
    )

    assert seen == [["<a@x>"], ["<a@x>", "<b@x>"]]
    assert [e.replied_to_message_id for e in mail.outbox] == ["<b@x>"]
    assert mail.outbox[0].text == "reply covering 2"
    assert result.key == second.key
    covered = harness.ledger.records[first.key]
    assert (covered.state, covered.covered_by) == (ReplyState.COVERED, second.key)


async def test_no_more_rewrites_than_supersede_max(mail: FakeAgentMail) -> None:
    harness = Harness(mail)
    messages = [_seed(mail, f"<m{n}@x>") for n in range(5)]
    messages = [_inbound(f"<m{n}@x>", minute=n) for n in range(5)]
    calls: list[int] = []
    arrivals = [[m] for m in messages[1:]]

    def writer(burst: Sequence[Inbound]) -> str:
        calls.append(len(burst))
        return "ok"

    async def newer() -> list[Inbound]:
        return arrivals.pop(0) if arrivals else []

    await reply_once(
        [messages[0]],
        harness.parts(simple_write(writer), newer=newer, supersede_max=2),
    )

    assert calls == [1, 2, 3]


async def test_a_failed_send_dead_letters_the_messages_that_superseded_the_first_too(
    mail: FakeAgentMail,
) -> None:
    harness = Harness(mail)
    first = _seed(mail, "<a@x>")
    second = _inbound("<not-in-the-mailbox@x>", minute=1)  # the API answers its reply 404
    arrivals = [[second], []]
    letters: list[list[str]] = []

    async def newer() -> list[Inbound]:
        return arrivals.pop(0) if arrivals else []

    async def dead_letter(record: ReplyRecord, reason: str, burst: Any = ()) -> None:
        letters.append([m.message_id for m in burst])

    result = await reply_once(
        [first],
        harness.parts(
            simple_write(lambda burst: "one reply"),
            dead_letter=dead_letter,
            newer=newer,
            policy=SendPolicy(attempts=1),
        ),
    )

    assert result.outcome is Outcome.FAILED
    assert letters == [["<a@x>", "<not-in-the-mailbox@x>"]]


# -- the exact records reply_once writes, with an in-memory sender --------------------


@dataclass
class Letters:
    letters: list[tuple[ReplyRecord, str, list[str]]] = field(default_factory=list)

    async def __call__(self, record: ReplyRecord, reason: str, burst: Sequence[Inbound]) -> None:
        self.letters.append((record, reason, [m.message_id for m in burst]))


async def _reply(
    burst: Sequence[Inbound],
    ledger: MemoryLedger,
    sender: StubSender | None = None,
    writer: Any = "the reply",
    **options: Any,
) -> BurstResult:
    """reply_once at :data:`T0` unless ``options`` give another clock; dead letters to a
    new :class:`Letters` unless they give another."""
    write = writer if callable(writer) else lambda burst: writer
    given = {"dead_letter": Letters(), "now": lambda: T0} | options
    return await reply_once(burst, reply_parts(ledger, sender or StubSender(), write, **given))


async def test_a_burst_writes_its_pending_reply_covers_the_other_then_records_the_send() -> None:
    ledger = MemoryLedger()
    first, latest = _inbound("<a@x>"), _inbound("<b@x>", minute=1)

    result = await _reply([latest, first], ledger)

    assert result == BurstResult(Outcome.SENT, latest.key, "<sent-1@x>")
    seen = (first.key,)  # the record names what its writer saw, and covers only that
    assert ledger.writes == [
        owed(latest, ReplyState.PENDING, reply_text="the reply", covers=seen),
        owed(first, ReplyState.COVERED, covered_by=latest.key),
        owed(
            latest,
            ReplyState.SENT,
            reply_text="the reply",
            sent_message_id="<sent-1@x>",
            attempts=1,
            covers=seen,
        ),
    ]


async def test_an_adopted_text_is_recorded_then_sent_with_the_key_instead_of_the_own() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    sender = StubSender()

    async def first_came_another(record: ReplyRecord) -> Verdict:
        return Verdict(Ruling.ADOPT, replace(record, reply_text="the first writer's"))

    result = await _reply([message], ledger, sender, "mine", arbitrate=first_came_another)

    assert result.outcome is Outcome.SENT
    assert [r.reply_text for r in sender.sent] == ["the first writer's"]
    assert [(w.state, w.reply_text) for w in ledger.writes] == [
        (ReplyState.PENDING, "mine"),
        (ReplyState.PENDING, "the first writer's"),
        (ReplyState.SENT, "the first writer's"),
    ]


async def test_a_reply_another_writer_recorded_sent_first_is_not_sent_again() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    sender = StubSender()
    theirs = owed(message, ReplyState.SENT, reply_text="theirs", sent_message_id="<r@x>")

    async def sent_by_another(record: ReplyRecord) -> Verdict:
        return Verdict(Ruling.SENT, theirs)

    result = await _reply([message], ledger, sender, "mine", arbitrate=sent_by_another)

    assert result == BurstResult(Outcome.ALREADY, message.key, "<r@x>")
    assert sender.sent == []
    assert ledger.records[message.key] == theirs


async def test_every_record_of_a_reply_carries_its_channel() -> None:
    ledger = MemoryLedger()
    burst = [_inbound("<a@x>"), _inbound("<b@x>", minute=1)]

    await _reply(burst, ledger, channel="nylas")

    assert [r.channel for r in ledger.writes] == ["nylas", "nylas", "nylas"]


async def test_a_handled_latest_message_leaves_the_rest_of_its_burst_a_reply_of_its_own() -> None:
    ledger = MemoryLedger()
    first, latest = _inbound("<a@x>"), _inbound("<b@x>", minute=1)
    await ledger.put(owed(latest, ReplyState.SENT, sent_message_id="<r@x>"))

    result = await _reply([first, latest], ledger)

    assert result == BurstResult(Outcome.SENT, first.key, "<sent-1@x>")
    assert ledger.writes[1:] == [
        owed(first, ReplyState.PENDING, reply_text="the reply", covers=()),
        owed(
            first,
            ReplyState.SENT,
            reply_text="the reply",
            sent_message_id="<sent-1@x>",
            attempts=1,
            covers=(),
        ),
    ]


async def test_a_failed_writer_records_its_attempts_and_error_and_dead_letters_the_burst() -> None:
    ledger, letters = MemoryLedger(), Letters()
    message = _inbound("<a@x>")

    def failing(burst: Sequence[Inbound]) -> str:
        raise WriterFailed("the writer failed", attempts=3, last_error="RuntimeError('429')")

    result = await _reply([message], ledger, writer=failing, dead_letter=letters)

    failed = owed(message, ReplyState.FAILED, attempts=3, error="RuntimeError('429')")
    assert result == BurstResult(Outcome.FAILED, message.key)
    assert ledger.writes == [failed]
    assert letters.letters == [
        (failed, "writer_failed after 3 attempt(s): RuntimeError('429')", ["<a@x>"])
    ]


async def test_a_declined_burst_records_the_reason_and_covers_the_other_messages() -> None:
    ledger = MemoryLedger()
    first, latest = _inbound("<a@x>"), _inbound("<b@x>", minute=1)

    result = await _reply([first, latest], ledger, writer=Decline("out of office"))

    assert result == BurstResult(Outcome.DECLINED, latest.key)
    assert ledger.writes == [
        owed(latest, ReplyState.DECLINED, reason="out of office"),
        owed(first, ReplyState.COVERED, covered_by=latest.key),
    ]


async def test_a_rejected_send_records_the_error_and_one_attempt() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    sender = StubSender(SendError(SendFailure.REJECTED, "422 invalid recipient"))

    result = await _reply([message], ledger, sender)

    assert result == BurstResult(Outcome.FAILED, message.key)
    assert ledger.writes[-1] == owed(
        message,
        ReplyState.FAILED,
        reply_text="the reply",
        attempts=1,
        error="422 invalid recipient",
        covers=(),
    )


async def test_the_writers_reported_cost_is_recorded_with_the_reply() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    text = Text("the reply")
    text.usage = Usage("m1", 120, 30)

    await _reply([message], ledger, writer=lambda burst: text)
    await _reply([_inbound("<b@x>", minute=1)], ledger, writer="a plain text")

    assert [(w.state, w.usage) for w in ledger.writes] == [
        (ReplyState.PENDING, Usage("m1", 120, 30)),
        (ReplyState.SENT, Usage("m1", 120, 30)),
        (ReplyState.PENDING, None),
        (ReplyState.SENT, None),
    ]


async def test_a_reply_found_in_the_thread_returns_its_key_and_id() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    await ledger.put(owed(message, ReplyState.PENDING, reply_text="t"))

    later = T0 + timedelta(hours=25)
    result = await _reply([message], ledger, StubSender(found="<r1@x>"), now=lambda: later)

    assert result == BurstResult(Outcome.ALREADY, message.key, "<r1@x>")


async def test_a_stale_reply_reads_the_thread_once_not_on_every_send_retry() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    await ledger.put(owed(message, ReplyState.PENDING, reply_text="t"))
    sender = StubSender(SendError(SendFailure.RETRY, "503"), SendError(SendFailure.RETRY, "503"))

    later = T0 + timedelta(hours=25)
    await _reply([message], ledger, sender, now=lambda: later)

    assert (len(sender.reads), len(sender.sent)) == (1, 1)


async def test_a_newer_message_that_has_a_record_already_does_not_supersede_the_reply() -> None:
    ledger = MemoryLedger()
    first, handled = _inbound("<a@x>"), _inbound("<b@x>", minute=1)
    await ledger.put(owed(handled, ReplyState.SENT, sent_message_id="<r@x>"))
    writer = CountingWriter()

    async def newer() -> list[Inbound]:
        return [handled]

    result = await _reply([first], ledger, writer=writer, newer=newer)

    assert (result.key, writer.calls) == (first.key, [1])


async def test_the_default_is_two_rewrites_at_most() -> None:
    arrivals = [[_inbound(f"<m{n}@x>", minute=n)] for n in range(1, 5)]
    writer = CountingWriter()

    async def newer() -> list[Inbound]:
        return arrivals.pop(0)

    await _reply([_inbound("<m0@x>")], MemoryLedger(), writer=writer, newer=newer)

    assert writer.calls == [1, 2, 3]


async def test_covering_skips_a_message_with_a_record_and_still_covers_the_next() -> None:
    ledger = MemoryLedger()
    a, b, c, latest = (_inbound(f"<{n}@x>", minute=i) for i, n in enumerate("abcd"))
    handled = owed(b, ReplyState.SENT, sent_message_id="<r@x>")
    await ledger.put(handled)

    await _reply([a, b, c, latest], ledger)

    assert ledger.records[b.key] == handled
    assert ledger.records[c.key] == owed(c, ReplyState.COVERED, covered_by=latest.key)


async def test_a_failed_record_is_not_written_again_unless_replayed() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    await ledger.put(owed(message, ReplyState.FAILED))
    writer = CountingWriter()

    result = await _reply([message], ledger, writer=writer)

    assert (result.outcome, writer.calls) == (Outcome.ALREADY, [])


async def test_a_replay_asks_the_writer_again_for_a_failed_record_without_text() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    await ledger.put(owed(message, ReplyState.FAILED))
    writer = CountingWriter()

    result = await _reply([message], ledger, writer=writer, replay=True)

    assert (result.outcome, writer.calls) == (Outcome.SENT, [1])


async def test_a_replayed_failed_writers_message_is_covered_by_the_newer_messages_reply() -> None:
    # a dead letter's retry: the writer failed for the older message; replayed with a newer
    # one, it is written with it, and its record says covered (left failed, the next replay
    # would write it and answer it again; simulator seed 288)
    ledger = MemoryLedger()
    older, newer = _inbound("<a@x>"), _inbound("<b@x>", minute=1)
    await ledger.put(owed(older, ReplyState.FAILED))
    writer = CountingWriter()

    result = await _reply([older, newer], ledger, writer=writer, replay=True)

    assert (result.key, result.outcome, writer.calls) == (newer.key, Outcome.SENT, [2])
    assert ledger.records[older.key] == owed(older, ReplyState.COVERED, covered_by=newer.key)


async def test_a_replay_of_a_failed_sends_message_alone_sends_its_text_covering_the_other() -> None:
    # a dead letter's retry that dead-lettered the newer message alone (its read failed)
    # and ran the older as covered: the newer one's next retry sends the recorded text,
    # which answers both (the simulator's checker holds the older by it: finding F50)
    ledger = MemoryLedger()
    older, newer = _inbound("<a@x>"), _inbound("<b@x>", minute=1)
    covers = (older.key, newer.key)
    failed = owed(newer, ReplyState.FAILED, reply_text="for both", covers=covers, attempts=5)
    await ledger.put(owed(older, ReplyState.COVERED, covered_by=newer.key))
    await ledger.put(failed)
    sender, writer = StubSender(), CountingWriter()

    covered = await _reply([older], ledger, sender, writer=writer, replay=True)
    result = await _reply([newer], ledger, sender, writer=writer, replay=True)

    assert (covered.outcome, result.outcome, writer.calls) == (Outcome.ALREADY, Outcome.SENT, [])
    assert [(r.key, r.reply_text, r.covers) for r in sender.sent] == [
        (newer.key, "for both", covers)
    ]
    assert ledger.records[newer.key].state is ReplyState.SENT


async def test_a_message_a_failed_sends_writer_saw_is_covered_by_it_not_written_again() -> None:
    # the worker stopped after the newer message's reply was recorded and before the older
    # was recorded covered; the reply (a person's approved draft) then failed its send. The
    # burst again: the older is covered by that reply, whose letter's retry sends it, never
    # given a reply of its own (two emails for it: the simulator's finding F51)
    ledger = MemoryLedger()
    older, newer = _inbound("<a@x>"), _inbound("<b@x>", minute=1)
    covers = (older.key, newer.key)
    await ledger.put(owed(newer, ReplyState.FAILED, reply_text="for both", covers=covers))
    sender, writer = StubSender(), CountingWriter()

    result = await _reply([older, newer], ledger, sender, writer=writer)

    assert (result.outcome, writer.calls, sender.tried) == (Outcome.ALREADY, [], [])
    assert ledger.records[older.key] == owed(older, ReplyState.COVERED, covered_by=newer.key)


async def test_a_fresh_pending_record_whose_reply_reached_an_api_ignoring_keys_sends_nothing(
    mail: FakeAgentMail,
) -> None:
    # a worker paused after its send reached the API and before it recorded it sent; its
    # partition's next owner finds the pending record a minute later, and this API does not
    # honour idempotency keys: only reading the thread first keeps the customer at one email
    harness, message, pending = _owed_since(mail, timedelta(minutes=1), "first text")
    await harness.ledger.put(pending)
    mail.ignore_keys()
    await harness.sender.reply(pending)  # the paused worker's send

    result = await harness.run([message])

    assert result.outcome is Outcome.ALREADY
    assert [entry.text for entry in mail.outbox] == ["first text"]
    assert harness.ledger.get(message.key).state is ReplyState.SENT  # type: ignore[union-attr]


async def test_an_async_writer_is_awaited() -> None:
    async def writer(burst: Sequence[Inbound]) -> str:
        return "awaited"

    assert await simple_write(writer)([_inbound("<a@x>")]) == "awaited"


async def test_a_writer_returning_none_declines_saying_so() -> None:
    assert await simple_write(lambda burst: None)([_inbound("<a@x>")]) == Decline(
        "the writer returned None"
    )


async def test_a_writer_returning_blank_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="returned str, not a non-empty str"):
        await simple_write(lambda burst: "  ")([_inbound("<a@x>")])


async def test_a_writer_returning_something_else_is_a_type_error_naming_its_type() -> None:
    with pytest.raises(TypeError, match="returned int, not a non-empty str"):
        await simple_write(lambda burst: 7)([_inbound("<a@x>")])


@pytest.mark.parametrize(
    ("failure", "attempts", "elapsed_s", "stops"),
    [
        (SendFailure.RETRY, 2, 0.0, False),
        (SendFailure.RETRY, 3, 0.0, True),
        (SendFailure.IN_FLIGHT, 30, 9.9, False),
        (SendFailure.IN_FLIGHT, 1, 10.0, True),
    ],
)
def test_a_send_gives_up_at_the_attempts_or_for_one_in_flight_at_the_wait(
    failure: SendFailure, attempts: int, elapsed_s: float, stops: bool
) -> None:
    policy = SendPolicy(attempts=3, in_flight_wait_s=10.0)

    assert give_up(policy, failure, attempts, elapsed_s) is stops


def test_the_send_retries_back_off_as_the_policy_says() -> None:
    policy = SendPolicy(backoff_initial_s=0.25, backoff_max_s=7.0)
    retrying = _retrying(policy, time.monotonic, time.monotonic())

    assert (retrying.wait.multiplier, retrying.wait.max) == (0.25, 7.0)  # type: ignore[attr-defined]


async def test_the_in_flight_wait_is_measured_on_the_given_clock() -> None:
    readings = iter([6.0, 12.0, 18.0])  # one reading per attempt, from the start at 0.0
    policy = SendPolicy(attempts=1, backoff_initial_s=0.0, in_flight_wait_s=10.0)
    calls = 0

    with pytest.raises(SendError):
        async for attempt in _retrying(policy, lambda: next(readings), 0.0):
            with attempt:
                calls += 1
                raise SendError(SendFailure.IN_FLIGHT, "first send in flight")

    assert calls == 2  # 6 s < 10 s: once more; 12 s: given up


class InFlightSender:
    """Each send takes 8 s on ``clock`` and answers that the first send is still in flight."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.sends = 0

    async def reply(self, record: ReplyRecord) -> str:
        self.sends += 1
        self.clock += 8.0
        raise SendError(SendFailure.IN_FLIGHT, "first send in flight")

    async def find_reply(self, record: ReplyRecord) -> str | None:
        return None


async def test_the_in_flight_wait_counts_from_the_first_send_not_from_its_first_retry(
    mail: FakeAgentMail,
) -> None:
    harness = Harness(mail)
    sender = InFlightSender()
    policy = SendPolicy(attempts=1, backoff_initial_s=0.0, in_flight_wait_s=10.0)
    parts = harness.parts(
        simple_write(harness.writer), sender=sender, policy=policy, monotonic=lambda: sender.clock
    )

    result = await reply_once([_inbound("<m1@x>")], parts)

    assert result.outcome is Outcome.FAILED
    assert sender.sends == 2  # 8 s after the start: once more; 16 s: past the 10 s wait


async def test_a_skipped_reply_is_logged_with_its_ids() -> None:
    ledger = MemoryLedger()
    message = _inbound("<a@x>")
    await ledger.put(owed(message, ReplyState.SENT, sent_message_id="<r@x>"))

    with structlog.testing.capture_logs() as logs:
        await _reply([message], ledger)

    assert logs[0] == {
        "event": "reply skipped: already handled",
        "log_level": "info",
        "reason": "skip_sent",
        "key": message.key,
        "inbox_id": INBOX,
        "message_id": "<a@x>",
    }


async def test_a_sent_reply_is_logged_with_its_ids_attempts_and_the_messages_it_covers() -> None:
    first, latest = _inbound("<a@x>"), _inbound("<b@x>", minute=1)

    with structlog.testing.capture_logs() as logs:
        await _reply([first, latest], MemoryLedger())

    assert logs[-1] == {
        "event": "reply sent",
        "log_level": "info",
        "sent": "<sent-1@x>",
        "attempts": 1,
        "covered": 1,
        "key": latest.key,
        "inbox_id": INBOX,
        "message_id": "<b@x>",
    }


async def test_a_reply_found_with_another_text_is_recorded_as_the_thread_has_it(
    mail: FakeAgentMail,
) -> None:
    # the partition's owner sent its text; a worker that woke after the partition moved had
    # recorded its own pending text after that (no fence reaches a write already under way):
    # the next reconcile finds the email and records what the customer read, not the late text
    harness, message, owners = _owed_since(mail, timedelta(minutes=1), "owner's text")
    await harness.sender.reply(owners)  # the owner's email
    late = owners.with_state(ReplyState.PENDING, reply_text="the woken worker's text")
    await harness.ledger.put(late)

    result = await harness.run([message])

    recorded = harness.ledger.get(message.key)
    assert result.outcome is Outcome.ALREADY and len(mail.outbox) == 1
    assert recorded is not None and recorded.state is ReplyState.SENT
    assert recorded.reply_text == "owner's text"

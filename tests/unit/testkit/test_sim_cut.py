"""A simulated worker cut off from the broker (its requests there wait for the heal, its
other calls go on, and past its session the group gives its partition away) or from the
mail API (its sends time out, and take effect at the heal)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from onceonly.processors.exceptions import SendError
from onceonly.processors.reply.late_sends import LateSends
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.approval import ApprovalDecision
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.sim import member as members
from testkit.sim.approvals import Operator
from testkit.sim.io import KAFKA, MAIL, Actor, current, remote
from testkit.sim.log import DRAIN_GRACE_S, SESSION_S
from testkit.sim.loop import run
from testkit.sim.mail import CLIENT_TIMEOUT_S, SimMail
from testkit.sim.run import run_schedule
from testkit.sim.schedule import Cuts, Schedule
from testkit.sim.world import World

pytestmark = pytest.mark.usefixtures("sim_quiet", "before_read_cuts")  # as their seeds were found


def _call(to: str | None, cut_at: float, cut_s: float) -> tuple[float, float]:
    """A call made at 0 with 1 s each way by an actor cut off from KAFKA from ``cut_at`` for
    ``cut_s``: when its far end ran and when its answer came."""

    async def play() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        actor = Actor("a1")
        current.set(actor)
        ran: list[float] = []

        def cut() -> None:
            actor.cut[KAFKA] = loop.time() + cut_s

        if cut_at:
            loop.call_at(cut_at, cut)
        else:
            cut()
        await remote(1.0, lambda: ran.append(loop.time()), 1.0, to)
        return ran[0], loop.time()

    return run(play())


def test_a_request_made_during_a_cut_reaches_the_broker_at_the_heal() -> None:
    assert _call(KAFKA, cut_at=0.0, cut_s=30.0) == (31.0, 32.0)


def test_an_answer_that_comes_during_a_cut_reaches_the_caller_at_the_heal() -> None:
    assert _call(KAFKA, cut_at=0.5, cut_s=30.0) == (1.0, 30.5)


def test_a_cut_from_the_broker_leaves_the_other_calls_alone() -> None:
    assert _call(None, cut_at=0.0, cut_s=30.0) == (1.0, 2.0)


def _cut_owner(seconds: float) -> tuple[str, str, list[str]]:
    """The group formed, its owner cut off from the broker for ``seconds``: the owners at
    the cut's end and after the heal, and what the cut member's trace says meanwhile."""

    async def play() -> tuple[str, str, list[str]]:
        world = World(Schedule(0))
        for slot in ("a", "b"):
            world.start(slot)
        world.rebalance("the group formed")
        await asyncio.sleep(DRAIN_GRACE_S + 1.0)
        owner = world.part.owner
        assert owner is not None
        world.cut(owner, seconds)
        await asyncio.sleep(seconds - 0.1)
        during = world.part.owner
        await asyncio.sleep(DRAIN_GRACE_S + 1.0)
        after = world.part.owner
        said = [str(what) for _, who, what in world.events if who == owner.name]
        return (
            "self" if during is owner else "other",
            "self" if after is owner else "other",
            said[1:],
        )

    return run(play())


def test_a_member_cut_off_past_its_session_loses_its_partition_and_learns_it_at_the_heal() -> None:
    during, after, said = _cut_owner(SESSION_S + 20.0)

    assert (during, after) == ("other", "other")
    assert said[-2:] == ["reconnected to the broker", "revoked (generation 1)"]


def test_a_member_cut_off_within_its_session_keeps_its_partition() -> None:
    during, after, said = _cut_owner(SESSION_S - 2.0)

    assert (during, after) == ("self", "self")
    assert said[-1] == "reconnected to the broker"


def _mail_cut_send(cut_s: float) -> tuple[str, float, list[tuple[str, bool]]]:
    """A send at 0 by a worker cut off from the mail API for ``cut_s``: how it ended and
    when, and the emails (message, late) once the cut healed."""

    async def play() -> tuple[str, float, list[tuple[str, bool]]]:
        loop = asyncio.get_running_loop()
        mail = SimMail(random.Random(1), lambda who, what: None, loop.time)
        mail.receive("inbox", "<m1@sim>", "t1", "hello")
        actor = Actor("a1")
        current.set(actor)
        actor.cut[MAIL] = cut_s
        record = ReplyRecord(
            key=reply_key("inbox", "<m1@sim>"),
            inbox_id="inbox",
            message_id="<m1@sim>",
            thread_key="agentmail:t1",
            state=ReplyState.PENDING,
            created_at=datetime(2026, 12, 7, tzinfo=UTC),
            reply_text="hi",
        )
        try:
            ended = await mail.reply(record)
        except SendError as exc:
            ended = exc.failure.value
        at = loop.time()
        await asyncio.sleep(cut_s + 5.0)
        return ended, at, [(e.replied_to, e.late) for e in mail.outbox]

    return run(play())


def test_a_send_during_a_cut_from_the_mail_api_times_out_and_takes_effect_at_the_heal() -> None:
    ended, at, emails = _mail_cut_send(60.0)

    assert (ended, at) == ("retryable", CLIENT_TIMEOUT_S)
    assert emails == [("<m1@sim>", True)]


def test_a_send_whose_cut_heals_within_the_clients_timeout_is_answered() -> None:
    ended, at, emails = _mail_cut_send(3.0)

    assert ended.startswith("<sent") and 3.0 < at < CLIENT_TIMEOUT_S
    assert emails == [("<m1@sim>", False)]


def test_no_schedule_with_keys_ignored_is_cut_off_from_the_mail_api() -> None:
    schedules = [Schedule(seed) for seed in range(300)]
    kinds = [
        {f.kind for f in s.faults if f.kind.startswith("cut_")} for s in schedules if s.ignore_keys
    ]
    honoured = [
        {f.kind for f in s.faults if f.kind.startswith("cut_")}
        for s in schedules
        if not s.ignore_keys
    ]

    assert kinds and not any("cut_mail" in k for k in kinds)
    assert any("cut_kafka" in k for k in kinds)
    assert 0.3 < sum("cut_mail" in k for k in honoured) / len(honoured) < 0.7


#: keys honoured: a1, cut off from the mail API, recorded replies failed and dead-lettered
#: them (send_failed); their held requests took effect at the heal, and 960 s after each
#: failure its late-send check read the thread and recorded the reply sent
SETTLED_LATE = 18


def test_the_late_send_check_records_sent_an_email_that_went_out_after_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked = run_schedule(Schedule(SETTLED_LATE))
    monkeypatch.setattr(members, "LATE_SEND_CHECK_S", 0.0)  # ONCEONLY_LATE_SEND_CHECK_S=0
    unchecked = run_schedule(Schedule(SETTLED_LATE))

    assert checked.passed and not checked.window_hits, checked.report()
    assert unchecked.late


#: approval on: b1 marked m1's draft superseded by m9 (covered by m9's reply) and was
#: killed before it wrote that reply; b2, cut off from the mail API, could not read the
#: thread and answered m9 alone: m1 stayed covered by a reply whose writer never saw it
#: (finding F43). Now the burst fails (ThreadUnread), is tried again, then dead-lettered
F43 = 1316


def test_f43_a_burst_whose_thread_cannot_be_read_is_dead_lettered_not_answered_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Cuts, "reads", True)  # --read-cuts, whatever a command set

    result = run_schedule(Schedule(F43))

    assert result.passed, result.report()
    assert any("record_failed ['<m9@sim>']" in e for e in result.events)


#: keys honoured: b2, cut off from the mail API for 164 s, recorded m40's reply failed and
#: dead-lettered it; its requests, held by the cut, reached the mail API at the heal and
#: the email went out, after b2 lost the partition
LATE = 27
#: keys honoured: b1's send of m46 was held by a cut from the mail API when a rebalance
#: cancelled its lane; re-assigned, b1 could not read the thread, recorded the reply failed,
#: and was killed before its late-send check; the held request sent the email at the heal
CANCELLED_LATE = 70045
#: keys honoured: m41's email went out, its answers lost; then b1 was cut off from the mail
#: API, its retries and its read of the thread timed out, and it recorded the reply failed
#: (killed before its late-send check)
FAILED_UNREAD = 890006648


@pytest.mark.parametrize(
    ("seed", "message"),
    [(LATE, "<m40@sim>"), (CANCELLED_LATE, "<m46@sim>"), (FAILED_UNREAD, "<m41@sim>")],
    ids=["gave-up", "lane-cancelled", "failed-unread"],
)
def test_a_failed_reply_whose_email_went_out_late_is_recorded_sent_by_the_next_owner(
    monkeypatch: pytest.MonkeyPatch, seed: int, message: str
) -> None:
    # the next owner's take-over finds the failed record its recorder did not live (or own
    # the partition long enough) to check; without it, the late send's window (counted apart)
    found = run_schedule(Schedule(seed))
    monkeypatch.setattr(LateSends, "taken", lambda self, *args, **kwargs: None)
    forgotten = run_schedule(Schedule(seed))

    assert found.passed and not found.late, found.report()
    assert forgotten.late and message in forgotten.late_sends


#: approval on: a paused worker's mark (m29's draft superseded by m53) landed after the
#: next owner, cut off from the mail API, had answered m53 alone (its store held m29's draft
#: awaiting, no mark to find); 910002652: the F32 path wrote m3's draft anew, and the
#: ledger wrote a paused worker's mark (covered by m18, whose writer never saw m3) back
#: over it
F43_LATE_MARK, F43_MARK_BACK = 910001234, 910002652
#: drawn: an approved draft's sends held by a cut, a paused worker's late mark of it (m13
#: superseded by m25) written back over its *failed* record; the email went out late and
#: the ledger's last word was the mark (finding F44)
F44 = 920003353
#: drawn: a paused worker's mark of m41's draft landed before the owner applied a person's
#: approval; ruled settling, it was written back over the approved record (the decision
#: lost), and a take-over later wrote the approved record again, which no one sent (F45)
F45 = 960002379
#: approval on: m34, its draft waiting, came again with the new m43 (a catch-up's burst)
#: while the owner was cut off from the mail API; m43's reply, written without m34, covered
#: it (finding F46: a burst's own waiting draft did not count as needing the thread)
F46 = 961002429
#: drawn: a paused worker's draft of m48 landed after the owner, its thread unread, had
#: dead-lettered m48's burst; the owner never held it and refused every approval: the
#: world waited on it to the deadline (the letter's, not a decision's: World._undecided)
UNDECIDED = 920000705
#: drawn (approval on), 1 of 20,000 with thread reads cut: m36 (dead-lettered while its
#: thread could not be read) came again with a catch-up after m6's draft had been written
#: anew covering the newer m40; m36's reply superseded that draft and recalled the thread's
#: messages before m36: m40 was left covered by a reply that never saw it (finding F47)
F47 = 980017150
#: drawn (approval on), the first 10,000 seeds with thread reads cut by default: b1's late
#: draft of m59 stood in the ledger while m59's burst waited in a dead letter; the world's
#: end-of-day approvals of it were refused (four, its budget for the key), and the draft the
#: letter's retry wrote anew was never approved: the world gave up on the key, not the
#: product (finding F48, the world's: a budget per draft now)
F48 = 984004196
#: drawn, thread reads cut: m38's email went out and its record ended *failed* (a paused
#: worker's, late); the last owner's take-over kept it, and the world judged the run while
#: its check was reading the thread that showed the email (finding F49, the world's: a
#: check's reads count as kept)
F49 = 986001583
#: drawn, thread reads cut: m40's send failed covering m35 (one letter for both); its retry,
#: cut from the mail API, could not read m40 (dead-lettered alone, ``fetch_failed``) and
#: ran m35 as covered: m35 is held by m40's letter, whose retry sends the recorded text
#: (finding F50, the checker's)
F50 = 987005377
#: drawn (approval on): a7's draft of m25 (its writer saw m16) landed, its ack lost, and a7
#: exited before recording m16 covered; the draft, edited and approved, failed its send
#: (its email went out late); the burst again wrote m16 a draft of its own, approved and
#: sent: m16 answered twice (finding F51)
F51 = 988012185
#: drawn (approval on), thread reads cut: a1's draft of m34 (its writer saw m9) landed and
#: a1 stopped before recording m9 covered; the burst [m9, m34, m44] again wrote m9 a draft
#: of its own (m44's, the latest, never saw m9), and every approval of m34's draft was
#: refused (it covers a message answered apart): m34 never answered (finding F52)
F52 = 988012303
#: drawn, thread reads cut: m22's burst marked m18's draft superseded and was dead-lettered
#: (its thread unread); b1 paused before settling m22's hold, and every retry of the letter
#: met that hold (``retry_raced``) until the hold's delivery ended the event failed: the
#: open retry_raced letters run m22's burst again, which recalls m18 (finding F53, the
#: checker's)
F53 = 989011088


@pytest.mark.parametrize(
    ("seed", "approval"),
    [
        (F43_LATE_MARK, True),
        (F43_MARK_BACK, True),
        (F44, None),
        (F45, None),
        (F46, True),
        (UNDECIDED, None),
        (F47, None),
        (F48, None),
        (F49, None),
        (F50, None),
        (F51, None),
        (F52, None),
        (F53, None),
    ],
    ids=[
        "f43-late-mark",
        "f43-mark-back",
        "f44-mark-undone",
        "f45-mark-first",
        "f46",
        "undecided",
        "f47-newer-covered",
        "f48-new-draft-approved",
        "f49-check-reading",
        "f50-cover-held-by-its-letter",
        "f51-failed-send-covers",
        "f52-earlier-draft-covers",
        "f53-raced-letter-reruns",
    ],
)
def test_a_seed_found_with_thread_reads_cut_settles_with_no_violation(
    monkeypatch: pytest.MonkeyPatch, seed: int, approval: bool | None
) -> None:
    monkeypatch.setattr(Cuts, "reads", True)

    result = run_schedule(Schedule(seed, require_approval=approval))

    assert result.passed and result.settled, result.report()


def test_a_draft_nobody_decides_keeps_the_world_busy_whatever_letter_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # seed 5, approval on: m51's message is in a retry_raced letter (its retry runs nothing
    # again) while its delivery wrote the draft; every decision on it lost, the run must
    # neither settle nor pass (a review's finding on the first World._undecided)
    m51 = reply_key("inbox0@sim", "<m51@sim>")
    produce, sweep = Operator._produce, Operator.sweep

    def lost(self: Operator, decision: ApprovalDecision) -> None:
        if decision.key != m51:
            produce(self, decision)

    def swept(self: Operator) -> None:
        self.swept.setdefault(m51, "lost")
        sweep(self)

    monkeypatch.setattr(Operator, "_produce", lost)
    monkeypatch.setattr(Operator, "sweep", swept)

    result = run_schedule(Schedule(5, require_approval=True))

    assert not result.settled and not result.passed

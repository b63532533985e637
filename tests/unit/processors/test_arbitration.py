"""Arbitration in the ledger: the first pending record of a key in the log owns the text;
a sent record before one's own means nothing is sent. Pure parts, then the ledger over
an in-memory table and log where another writer's records land between ours."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.processors.exceptions import Fenced
from onceonly.processors.reply.arbitration import PartitionLog, Ruling, Verdict, arbitrate
from onceonly.processors.reply.ledger import PENDING_KEPT, TableLedger
from onceonly.schemas.approval import Approval
from onceonly.schemas.approval import Verdict as ApprovalVerdict
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.processors._ledger_log import T0, LogTable, Reads
from tests.unit.processors._ledger_log import record as _record

# -- the ruling ---------------------------------------------------------------------------


def test_with_no_other_writer_the_own_record_is_sent() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [])

    assert (verdict.ruling, verdict.record) == (Ruling.OWN, own)


def test_an_earlier_pending_text_of_another_writer_is_adopted() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [(7, _record("k", ReplyState.PENDING, "theirs"))])

    assert verdict.ruling is Ruling.ADOPT
    assert verdict.record.reply_text == "theirs"
    assert verdict.record.state is ReplyState.PENDING


def test_the_first_of_several_earlier_pending_texts_is_adopted() -> None:
    own = _record("k", ReplyState.PENDING, "mine")
    others = [
        (8, _record("k", ReplyState.PENDING, "second")),
        (5, _record("k", ReplyState.PENDING, "first")),
    ]

    assert arbitrate(own, 10, others).record.reply_text == "first"


def test_another_writers_pending_record_after_the_own_one_is_ignored() -> None:
    own = _record("k", ReplyState.PENDING, "mine")

    verdict = arbitrate(own, 10, [(12, _record("k", ReplyState.PENDING, "theirs"))])

    assert (verdict.ruling, verdict.record.reply_text) == (Ruling.OWN, "mine")


def test_an_earlier_sent_record_means_nothing_is_sent() -> None:
    own = _record("k", ReplyState.PENDING, "mine")
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")

    verdict = arbitrate(own, 10, [(6, _record("k", ReplyState.PENDING, "theirs")), (9, sent)])

    assert (verdict.ruling, verdict.record) == (Ruling.SENT, sent)


def test_an_earlier_covered_or_declined_record_means_the_key_is_settled() -> None:
    own = _record("k", ReplyState.PENDING, "mine")
    covered = _record("k", ReplyState.COVERED, covered_by="reply-later")
    declined = _record("k", ReplyState.DECLINED, reason="not ours to answer")

    for theirs in (covered, declined):
        verdict = arbitrate(own, 5, [(3, theirs)])
        assert (verdict.ruling, verdict.record) == (Ruling.SETTLED, theirs)


@pytest.mark.parametrize(
    ("state", "covered_by", "made_s", "ruling"),
    [
        (ReplyState.COVERED, "reply-m50", -1, Ruling.OWN),
        (ReplyState.COVERED, "reply-m50", 1, Ruling.SETTLED),
        (ReplyState.COVERED, "reply-elsewhere", -1, Ruling.SETTLED),
        (ReplyState.DECLINED, None, -1, Ruling.SETTLED),
    ],
    ids=["late-cover-by-a-reply-the-own-covers", "made-after", "cover-elsewhere", "declined"],
)
def test_a_late_cover_by_a_reply_the_own_reply_covers_does_not_settle_the_key(
    state: ReplyState, covered_by: str | None, made_s: int, ruling: Ruling
) -> None:
    # finding F34 (seed 620020667, approval on): a zombie's record of m31, covered by m50's
    # reply and made before the rebalance, landed after the owner's draft of m31, which
    # covers m50; the draft approved, its pending record was ruled settled by it, and
    # neither m31 nor m50 got an email. Made after the own reply, covered by a reply the
    # own does not cover, or declined: the key is settled, as before
    own = replace(
        _record("k", ReplyState.PENDING, "mine", covers=("reply-m50",)),
        created_at=T0 + timedelta(seconds=10),
    )
    made = own.created_at + timedelta(seconds=made_s)
    other = _record("k", state, covered_by=covered_by, written_at=made)

    verdict = arbitrate(own, 5, [(3, other)])

    assert verdict.ruling is ruling


@pytest.mark.parametrize(
    ("mark_text", "made_s", "their_covers", "ruling"),
    [
        ("old draft", -1, ("reply-m17",), Ruling.OWN),
        ("old draft", -1, ("reply-m17", "k"), Ruling.SETTLED),
        ("old draft", 1, ("reply-m17",), Ruling.SETTLED),
        (None, -1, ("reply-m17",), Ruling.SETTLED),
        ("old draft", -1, None, Ruling.SETTLED),
    ],
    ids=["unseen-mark", "their-reply-saw-it", "mark-made-after", "no-draft", "no-reply"],
)
def test_a_drafts_mark_whose_covering_reply_never_saw_it_does_not_settle_the_key(
    mark_text: str | None, made_s: int, their_covers: tuple[str, ...] | None, ruling: Ruling
) -> None:
    # finding F43 (seed 910002652, approval on, reads cut): a paused worker's mark (m3's
    # draft superseded by m18) landed after m18's reply, written by a writer that never saw
    # m3; the owner wrote m3's draft anew (F32) and the mark, ruled settling, was written
    # again after it: m3 stayed covered by a reply that never saw it
    own = replace(_record("k", ReplyState.AWAITING, "anew"), created_at=T0 + timedelta(seconds=10))
    made = own.created_at + timedelta(seconds=made_s)
    mark = _record("k", ReplyState.COVERED, mark_text, covered_by="reply-m18", written_at=made)
    theirs = _record("reply-m18", ReplyState.SENT, "their reply", covers=their_covers)
    ledger = {"reply-m18": theirs} if their_covers is not None else {}

    verdict = arbitrate(own, 5, [(3, mark)], ledger.get)

    assert verdict.ruling is ruling


@pytest.mark.parametrize(
    ("rewritten", "ruling"),
    [
        ("the-approved-draft", Ruling.OWN),
        ("another-approval", Ruling.SETTLED),
        (None, Ruling.SETTLED),
    ],
)
def test_a_mark_undone_by_the_approved_draft_written_again_does_not_settle_its_failure(
    rewritten: str | None, ruling: Ruling
) -> None:
    # finding F44 (seed 920003353): a paused worker's mark of an approved draft landed after
    # it and, fenced, wrote the approved draft again after its mark; the owner's send failed
    # and its *failed* record was ruled settled by the mark, written back over it (the email
    # went out late; the ledger's last word a mark). The mark was undone: the failure stands
    approval = Approval(ApprovalVerdict.APPROVED, "ana", T0, "d-1")
    own = _record("k", ReplyState.FAILED, "approved", approval=approval)
    mark = _record("k", ReplyState.COVERED, "approved", covered_by="reply-m25")
    others = [(3, mark)]
    if rewritten is not None:
        again = (
            approval if rewritten == "the-approved-draft" else replace(approval, decision_id="d-2")
        )
        others.append((4, _record("k", ReplyState.PENDING, "approved", approval=again)))

    assert arbitrate(own, 6, others).ruling is ruling


@pytest.mark.parametrize(
    ("mark_s", "mark_approved", "own_approved", "ruling"),
    [
        (-1, False, True, Ruling.OWN),
        (1, False, True, Ruling.SETTLED),
        (-1, True, True, Ruling.SETTLED),
        (-1, False, False, Ruling.SETTLED),
    ],
    ids=["mark-made-before-the-approved", "made-after", "mark-approved", "own-unapproved"],
)
def test_a_mark_made_before_the_approved_draft_does_not_settle_it(
    mark_s: int, mark_approved: bool, own_approved: bool, ruling: Ruling
) -> None:
    # finding F45 (seed 960002379): a paused worker marked m41's draft superseded; its mark
    # landed before the owner applied a person's approval, was ruled settling and written
    # back over the approved pending record (the decision lost); a take-over later found
    # the mark late (made before) and wrote the pending record again, which no one sent
    approval = Approval(ApprovalVerdict.APPROVED, "ana", T0, "d-1")
    made = T0 + timedelta(seconds=10)
    own = _record("k", ReplyState.PENDING, "approved", written_at=made)
    own = replace(own, approval=approval if own_approved else None)
    mark = _record(
        "k",
        ReplyState.COVERED,
        "the draft",
        covered_by="reply-newer",
        written_at=made + timedelta(seconds=mark_s),
        approval=approval if mark_approved else None,
    )

    assert arbitrate(own, 5, [(3, mark)]).ruling is ruling


def test_a_mark_before_the_approved_draft_settles_it_when_its_reply_answers_the_message() -> None:
    # a review's finding on F45's first fix: the newer reply is sent and covers the message
    approval = Approval(ApprovalVerdict.APPROVED, "ana", T0, "d-1")
    made = T0 + timedelta(seconds=10)
    own = replace(_record("k", ReplyState.PENDING, "approved", written_at=made), approval=approval)
    mark = _record("k", ReplyState.COVERED, "the draft", covered_by="reply-n", written_at=T0)
    newer = _record("reply-n", ReplyState.SENT, "newer", covers=("k",))

    assert arbitrate(own, 5, [(3, mark)], {"reply-n": newer}.get).ruling is Ruling.SETTLED


def test_the_same_text_first_is_the_own_record() -> None:
    own = _record("k", ReplyState.PENDING, "same")

    verdict = arbitrate(own, 10, [(3, _record("k", ReplyState.PENDING, "same"))])

    assert verdict.ruling is Ruling.OWN


# -- the offsets a worker accounts for -------------------------------------------------------


def test_own_writes_after_the_recovered_end_leave_no_gap() -> None:
    log = PartitionLog(known=100)
    for offset in (100, 101, 102):
        log.wrote(offset)

    assert log.gaps(before=102) == []


def test_an_offset_not_written_here_is_a_gap_to_read() -> None:
    log = PartitionLog(known=100)
    log.wrote(100)
    log.wrote(102)  # 101 is another writer's

    assert log.gaps(before=102) == [(101, 101)]


def test_a_recovery_accounts_for_what_came_after_the_own_writes_only() -> None:
    log = PartitionLog(known=100)
    log.wrote(100)
    log.wrote(102)  # 101 is another writer's, below where a recovery starts

    log.recovered(through=110)

    assert log.gaps(before=111) == [(101, 101)]


def test_only_the_unaccounted_ranges_are_gaps() -> None:
    log = PartitionLog(known=100)
    for offset in (101, 102, 105):
        log.wrote(offset)

    assert log.gaps(before=107) == [(100, 100), (103, 104), (106, 106)]
    assert log.gaps(before=103) == [(100, 100)]


def test_a_read_gap_is_not_read_again_and_its_records_are_kept_by_key() -> None:
    log = PartitionLog(known=100)
    log.wrote(100)
    log.wrote(103)
    theirs = _record("k", ReplyState.PENDING, "theirs")

    log.learn([(101, "k", theirs), (102, "other", None)], 101, 102)

    assert log.gaps(before=103) == []
    assert log.others("k") == [(101, theirs)]
    assert log.others("other") == []


def test_own_records_in_a_read_gap_are_not_taken_for_another_writers() -> None:
    log = PartitionLog(known=100)
    log.wrote(101)  # its report came before 100's was known to be another's

    log.learn(
        [
            (100, "k", _record("k", ReplyState.PENDING, "theirs")),
            (101, "k", _record("k", ReplyState.PENDING, "mine")),
        ],
        100,
        101,
    )

    assert [text for _, r in log.others("k") for text in [r.reply_text]] == ["theirs"]


@given(
    st.integers(min_value=0, max_value=20),
    st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), min_size=1, max_size=60),
    st.data(),
)
def test_a_check_finds_every_other_writers_record_before_it_and_only_those(
    recovered: int, writes: list[tuple[bool, str]], data: st.DataObject
) -> None:
    # a partition whose first ``recovered`` offsets the store holds, then writes by this
    # worker (True) and another (False) in log order; the worker checks some of its own
    log = PartitionLog(known=recovered)
    theirs: list[tuple[int, str]] = []
    topic: list[tuple[int, str, ReplyRecord]] = []
    for index, (mine, key) in enumerate(writes):
        offset = recovered + index
        topic.append((offset, key, _record(key, ReplyState.PENDING, f"t{offset}")))
        if mine:
            log.wrote(offset)
            if data.draw(st.booleans()):
                _check(log, topic, offset, key, theirs)
        else:
            theirs.append((offset, key))


def _check(
    log: PartitionLog,
    topic: Sequence[tuple[int, str, ReplyRecord]],
    offset: int,
    key: str,
    theirs: Sequence[tuple[int, str]],
) -> None:
    for first, last in log.gaps(offset):
        log.learn(((o, k, r) for o, k, r in topic if first <= o <= last), first, last)
    assert log.gaps(offset) == []
    assert [o for o, _ in log.others(key) if o < offset] == [
        o for o, k in theirs if k == key and o < offset
    ]


# -- the ledger over a table and its log ---------------------------------------------------


def _ledger(
    recovered: int = 0, fence: Callable[[str], Awaitable[None]] | None = None
) -> tuple[TableLedger, list[tuple[bytes, bytes]], Reads]:
    """A ledger over a log of ``recovered`` records its table's recovery read, awaiting
    ``fence`` before each write; the log, and the reads of it arbitration makes."""
    topic: list[tuple[bytes, bytes]] = [
        (f"old{n}".encode(), _record(f"old{n}", ReplyState.SENT, "x").encode())
        for n in range(recovered)
    ]
    reads = Reads(topic)
    ledger = TableLedger(LogTable(topic, recovered), fence=fence, read_log=reads)  # type: ignore[arg-type]
    return ledger, topic, reads


#: another writer's pending record of the key ``k`` (a zombie's: its partition moved on)
ZOMBIES = _record("k", ReplyState.PENDING, "the zombie's")


def _lands(topic: list[tuple[bytes, bytes]], record: ReplyRecord) -> None:
    """Another writer's ``record`` lands in the log."""
    topic.append((record.key.encode(), record.encode()))


def _states(topic: list[tuple[bytes, bytes]]) -> list[ReplyState]:
    return [ReplyRecord.decode(v).state for _, v in topic]


async def _zombie_after_own(recovered: int = 0) -> tuple[TableLedger, Reads]:
    """A ledger (as :func:`_ledger`) that wrote its own pending record of key ``a``, after
    which the zombie's record of ``k`` landed in the log; and the reads of it."""
    ledger, topic, reads = _ledger(recovered=recovered)
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))
    _lands(topic, ZOMBIES)
    return ledger, reads


async def _arbitrate_own(ledger: TableLedger) -> Verdict:
    """The ruling on this worker's pending record of key ``k``, written now."""
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)
    return await ledger.arbitrate(own)


async def test_the_ledger_reads_nothing_when_only_its_own_records_came_first() -> None:
    ledger, _, reads = _ledger(recovered=3)
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_the_ledger_adopts_a_pending_text_another_writer_landed_first() -> None:
    ledger, reads = await _zombie_after_own(recovered=3)

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, verdict.record) == (Ruling.ADOPT, ZOMBIES)
    assert reads.calls == [(0, 4, 4)]


async def test_the_ledger_finds_a_sent_record_another_writer_landed_first() -> None:
    ledger, topic, _ = _ledger()
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")
    _lands(topic, sent)

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, verdict.record) == (Ruling.SENT, sent)


async def test_a_pending_record_landed_after_the_key_was_settled_is_followed_by_it() -> None:
    # finding F1: a worker past its fence check lands its pending record after the next
    # owner's sent one; its next write is fenced. The settled record is written again
    # (unfenced), so the compacted ledger's last word for the key is not *pending*
    fenced: list[str] = []

    async def fence(what: str) -> None:
        fenced.append(what)

    ledger, topic, _ = _ledger(fence=fence)
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")
    _lands(topic, sent)

    await ledger.put(_record("k", ReplyState.PENDING, "mine"))

    assert _states(topic) == [
        ReplyState.SENT,
        ReplyState.PENDING,
        ReplyState.SENT,
    ]
    assert ReplyRecord.decode(topic[-1][1]) == sent
    assert fenced == ["a ledger record"]  # the pending record's check; not the repeat's


@pytest.mark.parametrize(
    "late",
    [
        # finding F7 (seed 369674894): a worker whose writer failed, paused past its fence
        # check, lands *failed* after the next owner's sent record; the email is out
        ReplyState.FAILED,
        # finding F10 (seeds 384256286, 384708954): a worker wrote a new reply covering an
        # older message, paused past its fence check, and landed that message's *covered*
        # record after the next owner sent the message's own pending reply; the email is out
        ReplyState.COVERED,
    ],
    ids=["failed", "covered"],
)
async def test_a_failed_or_covered_record_landed_after_the_key_was_sent_is_followed_by_it(
    late: ReplyState,
) -> None:
    ledger, topic, _ = _ledger()
    sent = _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>")
    _lands(topic, sent)

    await ledger.put(_record("k", late, None))

    states = _states(topic)
    assert states == [ReplyState.SENT, late, ReplyState.SENT]
    assert ReplyRecord.decode(topic[-1][1]) == sent


@pytest.mark.parametrize(
    "settled",
    [
        _record("k", ReplyState.SENT, "theirs", sent_message_id="<r@x>"),
        _record("k", ReplyState.COVERED, "theirs", covered_by="k2", reason="superseded by k2"),
    ],
    ids=["sent", "superseded"],
)
async def test_an_awaiting_record_landed_after_the_key_was_settled_is_followed_by_it(
    settled: ReplyRecord,
) -> None:
    # finding F12 (seeds 1800; 1060, 1213): a worker paused past its fence check for its
    # draft's *awaiting* record lands it after the next owner sent the key's reply, or
    # superseded its own draft; left so, the draft would await a decision for ever
    ledger, topic, _ = _ledger()
    settled = replace(settled, written_at=T0)
    _lands(topic, settled)

    await ledger.put(_record("k", ReplyState.AWAITING, "the zombie's draft"))

    states = _states(topic)
    assert states == [settled.state, ReplyState.AWAITING, settled.state]
    assert ReplyRecord.decode(topic[-1][1]) == settled
    assert ReplyRecord.decode(topic[-1][1]).written_at == T0  # repeated as it was made


async def test_an_awaiting_record_after_another_writers_draft_is_its_keys_last_word() -> None:
    # no settled record came first: the ledger writes nothing more (the owner, whose draft
    # it may be, writes its own again when a decision names the other text: F12)
    ledger, topic, _ = _ledger(recovered=2)
    _lands(topic, _record("k", ReplyState.AWAITING, "the owner's draft"))

    await ledger.put(_record("k", ReplyState.AWAITING, "the zombie's draft"))

    assert ReplyRecord.decode(topic[-1][1]).reply_text == "the zombie's draft"


class Moved:
    """A fence that confirms the first ``owned`` checks, then refuses: the partition moved
    after this worker's check for its record (a pause right after it)."""

    def __init__(self, owned: int = 1) -> None:
        self.owned = owned
        self.asked: list[str] = []

    async def __call__(self, what: str) -> None:
        self.asked.append(what)
        if len(self.asked) > self.owned:
            raise Fenced("this worker no longer owns partition 0")


@pytest.mark.parametrize("state", [ReplyState.FAILED, ReplyState.COVERED, ReplyState.AWAITING])
async def test_a_late_record_after_the_owners_draft_is_followed_by_the_draft_then_fenced(
    state: ReplyState,
) -> None:
    # finding F17 (seed 434550709): a worker whose writer failed, paused past its fence
    # check, lands *failed* after the next owner's draft of the key; left so, the draft
    # leaves the approvals list and the messages it covers are never answered
    fence = Moved()
    ledger, topic, _ = _ledger(fence=fence)
    draft = _record("k", ReplyState.AWAITING, "the owner's draft", covers=("k0",))
    draft = replace(draft, written_at=T0)
    _lands(topic, draft)

    with pytest.raises(Fenced):
        await ledger.put(_record("k", state, "late"))

    assert _states(topic) == [
        ReplyState.AWAITING,
        state,
        ReplyState.AWAITING,
    ]
    # the draft as it was made: a repeat made anew would not look late to a take-over (F28)
    assert ReplyRecord.decode(topic[-1][1]).written_at == T0
    assert ReplyRecord.decode(topic[-1][1]) == draft
    assert fence.asked == ["a ledger record", "a late record's partition"]


async def test_a_late_draft_after_the_owners_approved_draft_is_followed_by_it_then_fenced() -> None:
    # finding F31 (seed 541801252): a worker paused past its fence check lands its older
    # draft after the owner applied a person's approval of its own; left so, the approvals
    # list shows the stale draft, a person approves it too, and the approved text goes
    # out under that decision
    fence = Moved()
    ledger, topic, _ = _ledger(fence=fence)
    approved = _record(
        "k",
        ReplyState.PENDING,
        "the owner's approved draft",
        approval=Approval(ApprovalVerdict.APPROVED, "ana", T0, "d-1"),
    )
    _lands(topic, approved)

    with pytest.raises(Fenced):
        await ledger.put(_record("k", ReplyState.AWAITING, "the late draft"))

    assert ReplyRecord.decode(topic[-1][1]) == approved


async def test_a_late_draft_after_another_writers_unapproved_pending_record_stands() -> None:
    # a reply with no approval on its way is sent by its writer whatever comes after it
    fence = Moved()
    ledger, topic, _ = _ledger(fence=fence)
    _lands(topic, _record("k", ReplyState.PENDING, "their reply"))

    await ledger.put(_record("k", ReplyState.AWAITING, "the late draft"))

    assert ReplyRecord.decode(topic[-1][1]).reply_text == "the late draft"


async def test_a_record_after_another_writers_draft_stands_while_the_partition_is_ours() -> None:
    # the fence confirms after the write: the other writer's draft was the late one
    fence = Moved(owned=2)
    ledger, topic, _ = _ledger(fence=fence)
    _lands(topic, _record("k", ReplyState.AWAITING, "a zombie's draft"))

    await ledger.put(_record("k", ReplyState.FAILED))

    assert _states(topic) == [
        ReplyState.AWAITING,
        ReplyState.FAILED,
    ]
    assert len(fence.asked) == 2


async def test_what_the_owner_wrote_while_its_draft_was_written_again_is_written_after_it() -> None:
    # the owner applies a person's approval between the late record and the draft's
    # repeat: its pending record is written again after the repeat, the key's last word
    draft = _record("k", ReplyState.AWAITING, "the owner's draft")
    approved = draft.with_state(ReplyState.PENDING)

    class Meanwhile(Moved):
        async def __call__(self, what: str) -> None:
            if len(self.asked) == 1:
                _lands(topic, approved)
            await super().__call__(what)

    ledger, topic, _ = _ledger(fence=Meanwhile())
    _lands(topic, draft)

    with pytest.raises(Fenced):
        await ledger.put(_record("k", ReplyState.FAILED))

    assert _states(topic) == [
        ReplyState.AWAITING,
        ReplyState.FAILED,
        ReplyState.PENDING,
        ReplyState.AWAITING,
        ReplyState.PENDING,
    ]


async def test_an_approved_draft_after_a_late_cover_by_a_reply_it_covers_is_sent() -> None:
    # finding F34 (seed 620020667, approval on): the owner's draft (covering m50), a
    # zombie's record of the key covered by m50's reply, made before the draft (before the
    # rebalance) and landing after it, then the draft approved. The pending record is the
    # key's last word and is sent; before, the covered record was ruled to settle the key
    # and written again after it: nothing sent
    fence = Moved(owned=10)
    ledger, topic, _ = _ledger(fence=fence)
    draft = replace(
        _record("k", ReplyState.AWAITING, "the owner's draft", covers=("reply-m50",)),
        created_at=T0 + timedelta(days=1),
    )
    await ledger.put(draft)
    _lands(topic, _record("k", ReplyState.COVERED, covered_by="reply-m50", written_at=T0))
    approved = replace(
        draft.with_state(ReplyState.PENDING),
        approval=Approval(ApprovalVerdict.APPROVED, "ana", T0 + timedelta(days=2), "d-1"),
    )

    await ledger.put(approved)

    assert _states(topic)[-1] is ReplyState.PENDING
    assert (await ledger.arbitrate(approved)).ruling is Ruling.OWN


async def test_a_covered_record_no_other_writer_settled_first_is_its_keys_last_word() -> None:
    ledger, topic, _ = _ledger(recovered=2)
    _lands(topic, ZOMBIES)

    await ledger.put(_record("k", ReplyState.COVERED, None))

    assert ReplyRecord.decode(topic[-1][1]).state is ReplyState.COVERED


async def test_a_failed_record_no_other_writer_settled_first_is_its_keys_last_word() -> None:
    ledger, topic, _ = _ledger(recovered=2)
    _lands(topic, ZOMBIES)

    await ledger.put(_record("k", ReplyState.FAILED, None))

    assert ReplyRecord.decode(topic[-1][1]).state is ReplyState.FAILED


async def _refused(what: str) -> None:
    raise Fenced("this worker no longer owns partition 0")


async def test_a_sent_record_the_fence_refuses_is_written_all_the_same_then_fenced() -> None:
    # finding F8 (seed 369682463): a worker's send past its check went out after the next
    # owner recorded the reply failed; its sent record, refused, left failed the last word
    ledger, topic, _ = _ledger(fence=_refused)
    sent = _record("k", ReplyState.SENT, "mine", sent_message_id="<r@x>")

    with pytest.raises(Fenced):
        await ledger.put(sent)

    assert [ReplyRecord.decode(v) for _, v in topic] == [sent]


async def test_a_sent_record_written_after_the_fence_refused_it_keeps_its_stamp() -> None:
    # made before the fence check, which came before the rebalance: written so, not made
    # anew after the next owner's records (which would hide that it landed late)
    stamps = iter([T0, T0 + timedelta(minutes=5)])
    ledger, topic, _ = _ledger(fence=_refused)
    ledger.clock = lambda: next(stamps)

    with pytest.raises(Fenced):
        await ledger.put(_record("k", ReplyState.SENT, "mine", sent_message_id="<r@x>"))

    assert ReplyRecord.decode(topic[-1][1]).written_at == T0


async def test_any_other_record_the_fence_refuses_is_not_written() -> None:
    ledger, topic, _ = _ledger(fence=_refused)

    for state in (ReplyState.PENDING, ReplyState.FAILED, ReplyState.COVERED):
        with pytest.raises(Fenced):
            await ledger.put(_record("k", state, "mine"))

    assert topic == []


async def test_a_pending_record_no_other_writer_settled_first_is_its_keys_last_word() -> None:
    ledger, topic, _ = _ledger(recovered=2)
    _lands(topic, ZOMBIES)

    await ledger.put(_record("k", ReplyState.PENDING, "mine"))

    assert ReplyRecord.decode(topic[-1][1]).reply_text == "mine"


async def test_a_record_another_writer_landed_after_the_own_is_not_read_for_it() -> None:
    ledger, topic, reads = _ledger()
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)
    _lands(topic, _record("k", ReplyState.PENDING, "later"))

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_a_recovered_pending_record_is_its_keys_first() -> None:
    ledger, _, reads = _ledger()
    recovered = _record("k", ReplyState.PENDING, "recovered")

    verdict = await ledger.arbitrate(recovered)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


def _table(ledger: TableLedger) -> LogTable:
    assert isinstance(ledger.table, LogTable)
    return ledger.table


async def test_after_a_rebalance_what_its_recovery_read_is_not_read_again() -> None:
    ledger, topic, reads = _ledger()
    await ledger.put(_record("a", ReplyState.PENDING, "a's"))
    ledger.forget()
    _lands(topic, _record("z", ReplyState.PENDING, "recovered by now"))
    _table(ledger).recover()

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, reads.calls) == (Ruling.OWN, [])


async def test_a_record_landed_before_an_own_write_is_read_after_a_rebalance() -> None:
    # the zombie's record lands between two of ours: faust's offset moves past the second,
    # so the rebalance's recovery starts after both and never reads it
    ledger, reads = await _zombie_after_own(recovered=2)
    await ledger.put(_record("b", ReplyState.PENDING, "b's"))
    ledger.forget()
    _table(ledger).recover()

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, verdict.record) == (Ruling.ADOPT, ZOMBIES)
    assert reads.calls == [(0, 3, 3)]


async def test_a_pending_record_written_before_a_rebalance_is_still_arbitrated() -> None:
    ledger, _ = await _zombie_after_own()
    own = _record("k", ReplyState.PENDING, "mine")
    await ledger.put(own)
    ledger.forget()  # the partition stayed; the lane goes on to send

    verdict = await ledger.arbitrate(own)

    assert (verdict.ruling, verdict.record) == (Ruling.ADOPT, ZOMBIES)


async def test_a_write_under_way_at_a_rebalance_does_not_hide_a_record_before_it() -> None:
    # a lane's write is acknowledged (the store's offset moves past it) but the lane has
    # not resumed when another lane writes after the rebalance
    ledger, reads = await _zombie_after_own()
    table = _table(ledger)
    table.hold = asyncio.Event()
    under_way = asyncio.create_task(ledger.put(_record("b", ReplyState.PENDING, "b's")))
    while table.applied < 2:
        await asyncio.sleep(0)
    table.hold = None
    ledger.forget()

    verdict = await _arbitrate_own(ledger)

    assert (verdict.ruling, verdict.record) == (Ruling.ADOPT, ZOMBIES)
    assert reads.calls == [(0, 1, 2)]  # b's offset too: not yet known to be its own
    under_way.cancel()


async def test_the_pending_records_remembered_are_bounded() -> None:
    ledger, _, _ = _ledger()
    for n in range(PENDING_KEPT + 2):
        ledger._pending[f"k{n}"] = (0, n)
    await ledger.put(_record("last", ReplyState.PENDING, "x"))

    assert len(ledger._pending) == PENDING_KEPT
    assert "k0" not in ledger._pending and "last" in ledger._pending


@settings(deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["mine", "theirs"]), st.sampled_from("abc")),
            st.tuples(st.just("rebalance"), st.sampled_from(["recovered", "kept"])),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=0, max_value=3),
)
def test_every_record_no_recovery_read_is_found_across_rebalances(
    steps: list[tuple[str, str]], recovered: int
) -> None:
    # writes by this worker and another, and rebalances (whose recovery reads what came
    # after the store's offset, or, for a partition kept, nothing): each own pending
    # record is ruled on every other writer's record of its key before it that no
    # recovery read into the store, and the topic is read for no other offset
    async def run() -> None:
        ledger, topic, reads = _ledger(recovered)
        table = _table(ledger)
        mine: set[int] = set()
        for what, which in steps:
            if what == "rebalance":
                ledger.forget()
                if which == "recovered":
                    table.recover()
            elif what == "theirs":
                text = f"theirs{len(topic)}"
                topic.append((which.encode(), _record(which, ReplyState.PENDING, text).encode()))
            else:
                own = _record(which, ReplyState.PENDING, f"mine{len(topic)}")
                await ledger.put(own)
                offset = len(topic) - 1
                mine.add(offset)
                expected = [
                    (o, ReplyRecord.decode(v))
                    for o, (k, v) in enumerate(topic[:offset])
                    if k == which.encode() and o not in mine and o not in table.read
                ]
                assert await ledger.arbitrate(own) == arbitrate(own, offset, expected)
        read = {o for _, first, last in reads.calls for o in range(first, last + 1)}
        assert not read & (mine | table.read)

    asyncio.run(run())


def test_an_adopted_text_covers_what_its_writer_saw_not_what_the_own_writer_saw() -> None:
    # the own writer saw an older message the other did not (a late arrival): the adopted
    # text must not be recorded as its answer (the simulator's finding F21)
    own = _record("k", ReplyState.PENDING, "mine", covers=("reply-old", "reply-both"))
    theirs = _record("k", ReplyState.PENDING, "theirs", covers=("reply-both",))

    verdict = arbitrate(own, 10, [(7, theirs)])

    assert (verdict.ruling, verdict.record.reply_text) == (Ruling.ADOPT, "theirs")
    assert verdict.record.covers == ("reply-both",)

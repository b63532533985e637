"""Reply once: skips, the send policy, and :func:`reply_once`, which answers a burst.

The decisions are pure functions (:mod:`onceonly.processors.reply.bursts`); :func:`reply_once`
strings them together against three small protocols (a ledger that acknowledges writes, a
mail sender, a reply writer): the same under the faust worker and in unit tests.

The order is the guarantee: the reply text and its idempotency key are recorded in the
ledger, and the broker has acknowledged them, *before* the email is sent with that key.
A crash anywhere resends the same text with the same key, which the mail API replays
instead of sending twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

import structlog

from onceonly.processors.exceptions import WriterFailed
from onceonly.processors.messages import Inbound, Skip, reply_key
from onceonly.processors.reply.bursts import (
    BurstResult,
    Division,
    Outcome,
    Plan,
    already,
    chain_end,
    distinct,
    divide,
    left_drafts,
    plan,
    seen_unrecorded,
    split_burst,
    summarize,
    supersede,
)
from onceonly.processors.reply.parts import (
    DeadLetter,
    Ledger,
    MailSender,
    Newer,
    ReplyParts,
    SendPolicy,
    Write,
    log_ids,
)
from onceonly.processors.reply.sending import Sending, send_recorded
from onceonly.processors.writer.contract import Decline, Draft, ReplyWriter, Text
from onceonly.schemas.ledger import ReplyRecord, ReplyState

__all__ = [
    "BurstResult",
    "DeadLetter",
    "Inbound",
    "Ledger",
    "MailSender",
    "Newer",
    "Outcome",
    "Plan",
    "ReplyParts",
    "ReplyWriter",
    "SendPolicy",
    "Skip",
    "Write",
    "answered_by",
    "cover_seen",
    "covered_by",
    "plan",
    "reply_key",
    "reply_once",
    "send_recorded",
    "simple_write",
    "split_burst",
]

log = structlog.get_logger("onceonly.reply")


def simple_write(writer: ReplyWriter) -> Write:
    """A plain callable as the writer step, with no policy (unit tests, tools)."""

    async def write(burst: Sequence[Inbound]) -> str | Decline | Draft:
        text = writer(burst)
        if inspect.isawaitable(text):
            text = await text
        if isinstance(text, Draft):
            return text
        if text is None or isinstance(text, Decline):
            return text or Decline("the writer returned None")
        if not isinstance(text, str) or not text.strip():
            raise TypeError(f"the reply writer returned {type(text).__name__}, not a non-empty str")
        return text

    return write


async def reply_once(
    burst: Sequence[Inbound],
    parts: ReplyParts,
    *,
    rewrite: Collection[str] = frozenset(),  # recorded, written again: a superseded draft's
) -> BurstResult:
    """Answer a burst of one thread's messages, each by a reply whose writer saw it.

    The burst is divided by the ledger (:func:`~onceonly.processors.reply.bursts.divide`).
    A recorded *pending* reply is finished first, wherever its message is in the burst:
    arbitrated, it covers the burst's unrecorded messages its writer saw, and unless the
    thread holds it, it is sent with its stored text and key. The messages with no record
    get one reply, to the latest; newer messages of the thread (``parts.newer``) that came
    while the writer composed have it asked again with them (``supersede_max`` times at
    most). Returns the burst's result (:func:`~onceonly.processors.reply.bursts.summarize`).
    """
    ledger, now, channel = parts.ledger, parts.now, parts.channel
    burst = distinct(burst)
    await cover_seen(burst, parts)
    latest = ledger.get(split_burst(burst)[0].key)
    await _supersede_left(ledger, latest)
    division = divide(
        [
            (m, Plan.WRITE if m.key in rewrite else plan(ledger.get(m.key), replay=parts.replay))
            for m in burst
        ],
        latest.covers if latest is not None else None,
    )
    done = [_skipped(ledger, message, step) for message, step in division.done]
    send = Sending(parts)
    acted: list[BurstResult] = []
    finishing = {message.key for message, _ in division.finish}
    if division.covered_by is not None and division.covered_by not in finishing:
        # the latest message's settled reply saw them
        await _cover(ledger, division.cover, division.covered_by, now, channel)
    write = list(division.write)
    for message, _ in division.finish:
        record = ledger.get(message.key)
        assert record is not None
        if message.key != division.covered_by:
            # an earlier message's covers what its writer saw too (a review of F52)
            seen = [m for m in write if m.key in (record.covers or ())]
            write = [m for m in write if m not in seen]
            acted += await _answer(record, seen, [*seen, message], parts, send, reconcile=True)
            continue
        # the latest message's pending reply: arbitrated before it covers anything
        before = _covered_before(ledger, division, message.key)
        answers = [*before, *division.cover, message]
        acted += await _answer(record, division.cover, answers, parts, send, reconcile=True)
    if write:
        acted += await _write(write, parts, send)
    return summarize(acted, done)


async def cover_seen(burst: Sequence[Inbound], parts: ReplyParts) -> None:
    """Each message of ``burst`` with no record that a written reply of another of its
    messages saw (:func:`~onceonly.processors.reply.bursts.seen_unrecorded`: that reply's
    writer stopped before recording it covered), recorded covered by that reply."""
    ledger = parts.ledger
    for message, by in seen_unrecorded(burst, {m.key: ledger.get(m.key) for m in burst}):
        log.warning(
            "a message the reply covers had no record: recorded covered by it",
            key=message.key,
            covered_by=by,
        )
        await _cover(ledger, [message], by, parts.now, parts.channel)


async def _supersede_left(ledger: Ledger, latest: ReplyRecord | None) -> None:
    """Each draft the burst's latest reply supersedes but that still awaits a decision
    (:func:`~onceonly.processors.reply.bursts.left_drafts`; the simulator's finding F28) is
    marked superseded by it before the burst is divided: its message is covered by the
    reply whose writer saw it, and a decision on the draft is refused."""
    if latest is None or not latest.covers:
        return
    superseded, left = left_drafts(latest, {key: ledger.get(key) for key in latest.covers})
    for draft in superseded:
        await ledger.put(supersede(draft, latest.key))
        log.warning(
            "a waiting draft superseded by the newer reply that covers its message",
            key=draft.key,
            newer=latest.key,
        )
    for draft in left:  # its writer saw a message the newer reply's did not
        log.error(
            "a draft waits beside a newer reply that covers its message; approve one "
            "of them, not both (onceonly approvals reject)",
            key=draft.key,
            newer=latest.key,
        )


async def _write(burst: Sequence[Inbound], parts: ReplyParts, send: Sending) -> list[BurstResult]:
    """The messages with no record: one reply written, recorded, arbitrated and sent."""
    written = await _compose(burst, parts)
    if isinstance(written, BurstResult):
        return [written]
    record, others, messages = written
    return await _answer(record, others, messages, parts, send, reconcile=False)


async def _answer(
    record: ReplyRecord,
    others: Sequence[Inbound],
    answers: Sequence[Inbound],
    parts: ReplyParts,
    send: Sending,
    *,
    reconcile: bool,
) -> list[BurstResult]:
    """Send the recorded ``record`` (*pending*, or on a replay a failed send's), which
    covers ``others`` (messages with no record yet) and answers ``answers`` (dead-lettered
    with it if it fails).

    Arbitration comes first: another writer's reply that came first (its pending text, or
    its sent record) answers instead, and covers only what its writer saw; the others are
    answered anew (the simulator's finding F21). ``reconcile``: the thread is read for
    the reply before it is sent (a record written before this burst)."""
    answer, result = record, None
    if record.state is ReplyState.PENDING:
        answer, result = await send.arbitrate(record)
    seen = [m for m in others if answer.covers is None or m.key in answer.covers]
    unseen = [m for m in others if m not in seen]
    # the record's key, not the first target's: a rewrite answers the latest message
    await _cover(parts.ledger, seen, record.key, parts.now, parts.channel)
    if result is None:
        kept = [m for m in answers if m not in unseen]
        result = await send(answer, reconcile, kept, len(kept) - 1, arbitrated=True)
    if not unseen:
        return [result]
    log.warning(  # the simulator's finding F21
        "another writer's reply came first and its writer did not see these messages; "
        "they are answered anew",
        key=record.key,
        unseen=[m.key for m in unseen],
    )
    # each is owed a writing (no record, or one a superseded draft's rewrite recalled)
    return [result, await reply_once(unseen, parts, rewrite=frozenset(m.key for m in unseen))]


def _covered_before(ledger: Ledger, division: Division, key: str) -> tuple[Inbound, ...]:
    """The burst's messages recorded covered by the pending reply ``key`` before this
    burst, which go (and are dead-lettered) with it: a worker stopped after their covered
    records, before its send; their answer is this send (simulator seed 384256741)."""
    return tuple(
        message
        for message, step in division.done
        if step is Plan.SKIP_COVERED and covered_by(ledger, ledger.get(message.key), key)
    )


def covered_by(ledger: Ledger, record: ReplyRecord | None, key: str) -> bool:
    """Whether ``record`` is a message recorded *covered* by the reply ``key``, directly or
    through a draft that ``key`` superseded (a chain of *covered* records ending at it):
    its answer is that reply's email, so it goes (and is dead-lettered) with it."""
    return chain_end(ledger.get, record, {key}) == key


def answered_by(ledger: Ledger, record: ReplyRecord) -> tuple[ReplyRecord, ...]:
    """The records of the messages the reply ``record`` answers, known from the ledger
    alone (an approved draft sent long after its burst): its own and those of its
    ``covers`` recorded covered by it (a covered message with a reply of its own is that
    reply's)."""
    covered = (ledger.get(key) for key in record.covers or ())
    return (record, *(r for r in covered if r is not None and covered_by(ledger, r, record.key)))


def _skipped(ledger: Ledger, message: Inbound, step: Plan) -> BurstResult:
    log.info("reply skipped: already handled", reason=step.value, **log_ids(message))
    return already(message, step, ledger.get(message.key))


def _writer_failed(message: Inbound, exc: WriterFailed, now: datetime, channel: str) -> ReplyRecord:
    """``message``'s *failed* record (no text) after the writer failed for its burst."""
    record = _record_for(message, ReplyState.FAILED, now, channel)
    return record.with_state(ReplyState.FAILED, attempts=exc.attempts, error=exc.last_error)


def _record_for(target: Inbound, state: ReplyState, now: datetime, channel: str) -> ReplyRecord:
    return ReplyRecord(
        key=target.key,
        inbox_id=target.inbox_id,
        message_id=target.message_id,
        thread_key=target.thread_key,
        state=state,
        created_at=now,
        channel=channel,
        message_at=target.occurred_at,
    )


async def _compose(
    burst: Sequence[Inbound], parts: ReplyParts
) -> BurstResult | tuple[ReplyRecord, tuple[Inbound, ...], list[Inbound]]:
    """Ask the writer (again, while newer messages arrive); record what it decided.

    Returns the acknowledged *pending* record, the messages it covers and all the messages
    it answers (the burst and what superseded it), or the result when there is nothing to
    send (declined, or the writer failed and was dead-lettered).
    """
    ledger, now, channel, write = parts.ledger, parts.now, parts.channel, parts.write
    messages = list(burst)
    try:
        written = await write(messages)
        for _ in range(parts.supersede_max):
            have = {m.key for m in messages}
            more = [m for m in distinct(await parts.newer()) if m.key not in have]
            more = [m for m in more if ledger.get(m.key) is None]
            if not more:
                break
            messages.extend(more)
            parts.on_superseded()
            log.info("reply superseded by newer messages; writing again", newer=len(more))
            written = await write(messages)
    except WriterFailed as exc:
        target, _ = split_burst(messages)
        failed = _writer_failed(target, exc, now(), channel)
        reason = f"writer_failed after {exc.attempts} attempt(s): {exc.last_error}"
        await parts.dead_letter(failed, reason, messages)  # first: F33
        await ledger.put(failed)
        # the letter's other messages with no record here are recorded failed too (no
        # text: its retry writes them, as the target's): left unrecorded, a late draft of
        # one by a worker past its ownership check stayed its last word, in the approvals
        # list, and no decision on it could move it (the simulator's finding F35)
        for message in messages:
            if message.key != target.key and ledger.get(message.key) is None:
                await ledger.put(_writer_failed(message, exc, now(), channel))
        log.error("reply dead-lettered", reason=reason, key=target.key)
        return BurstResult(Outcome.FAILED, target.key)
    target, covered = split_burst(messages)
    base = _record_for(target, ReplyState.PENDING, now(), channel)
    if isinstance(written, Decline):
        declined = base.with_state(ReplyState.DECLINED, reason=written.reason, usage=written.usage)
        await ledger.put(declined)
        await _cover(ledger, covered, target.key, now, channel)
        log.info("reply declined by the writer", reason=written.reason, key=target.key)
        return BurstResult(Outcome.DECLINED, target.key)
    seen = tuple(m.key for m in covered)
    if isinstance(written, Draft):  # a person approves it first: recorded, not sent
        draft = dict(reply_text=written.text, reason=written.reason, covers=seen)
        await ledger.put(base.with_state(ReplyState.AWAITING, **draft))
        await _cover(ledger, covered, target.key, now, channel)
        log.info("reply drafted; awaiting approval", reason=written.reason, key=target.key)
        return BurstResult(Outcome.AWAITING, target.key)
    usage = written.usage if isinstance(written, Text) else None  # the writer's reported cost
    record = base.with_state(ReplyState.PENDING, reply_text=str(written), covers=seen, usage=usage)
    await ledger.put(record)  # acknowledged before anything is sent
    return record, covered, messages


def _coverable(record: ReplyRecord | None) -> bool:
    """Whether a message of a burst's reply may be recorded covered by it: no record, or a
    failed writer's (no text), which only a replay writes again (:func:`plan`). Left
    *failed*, a message the reply answered would be written and answered again by the next
    replay (simulator finding F14, seed 288: a dead letter retried with a newer message)."""
    if record is None:
        return True
    return record.state is ReplyState.FAILED and record.reply_text is None


def _covered_elsewhere(
    ledger: Ledger, record: ReplyRecord | None, by: str, with_it: Collection[str]
) -> bool:
    """A *covered* record whose chain ends at another reply: neither at ``by`` nor at a
    message covered by ``by`` with it (``with_it``), nor at a record not written yet."""
    return isinstance(chain_end(ledger.get, record, {by, *with_it}), ReplyRecord)


async def _cover(
    ledger: Ledger,
    covered: Iterable[Inbound],
    by: str,
    now: Callable[[], datetime],
    channel: str,
) -> None:
    """Record the burst's other messages as answered by ``by``, unless they have a record
    (a replay's failed writer's record is covered: the writer was asked again with it).

    A message a superseded draft's rewrite recalled has a *covered* record already: left
    while its chain leads to ``by`` (it names the draft, the draft the newer reply), written
    again when it leads elsewhere. The newer message's reply was then another writer's,
    which never saw it, and ``by`` answers it anew (simulator finding F25)."""
    covered = list(covered)
    with_it = {m.key for m in covered}
    for message in covered:
        record = ledger.get(message.key)
        if not (_coverable(record) or _covered_elsewhere(ledger, record, by, with_it)):
            continue
        await ledger.put(
            ReplyRecord(
                key=message.key,
                inbox_id=message.inbox_id,
                message_id=message.message_id,
                thread_key=message.thread_key,
                state=ReplyState.COVERED,
                created_at=now(),
                covered_by=by,
                channel=channel,
                message_at=message.occurred_at,
            )
        )
        log.info("message covered by the burst's reply", key=message.key, covered_by=by)

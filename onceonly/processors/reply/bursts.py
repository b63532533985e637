"""What a burst of one thread's messages is owed, decided from each message's ledger record.

A message is covered only by a reply whose writer saw it. So a released burst is divided:

* a message with a *pending* record (or, on a replay, a failed send's) is finished with
  its stored text and key, wherever it comes in the burst: the writer is never asked again.
  The thread is read for that reply first (:attr:`Plan.RECONCILE`): the worker that wrote
  the record may have sent it and stopped (killed, or paused until its partitions moved)
  before recording it sent, and a mail API need not honour the key;
* a message recorded sent, covered, declined or failed is done;
* the messages with no record are written together, once, and their reply goes to the
  latest of them, which covers the others. When the burst's latest message has a pending
  record, the ones its writer saw (the record's ``covers``) are covered by it instead:
  that record was written just before their records, so a crash between the two leaves
  exactly this; the others (a late arrival, a caught-up message) are written anew. The
  same holds when that reply is already sent (or a draft, or declined) and names what
  it covers: the next owner may have finished it before it saw the older messages again
  (a worker paused past its session between the two writes; the simulator's finding F4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from onceonly.processors.messages import Inbound
from onceonly.schemas.ledger import ReplyRecord, ReplyState


class Plan(StrEnum):
    WRITE = "write"  #: no record: write the reply, record it, then send
    #: a pending record: look in the thread for its reply, else send its stored text and key
    RECONCILE = "reconcile"
    SKIP_SENT = "skip_sent"
    SKIP_COVERED = "skip_covered"
    SKIP_FAILED = "skip_failed"  #: the writer failed (no text): its letter's retry writes it
    #: a send failed (its text recorded): its letter's retry sends it, answering its covers
    SKIP_SEND_FAILED = "skip_send_failed"
    SKIP_DECLINED = "skip_declined"
    SKIP_AWAITING = "skip_awaiting"  #: a draft waits for a person: never written again


#: the plans of a recorded reply that is sent with its stored text
FINISH = frozenset({Plan.RECONCILE})
#: the plans of a latest message whose reply a writer wrote (sent, a draft, declined, a
#: failed send): its writer saw the messages of its ``covers``, recorded covered right
#: after it (a worker stopped in between leaves some unrecorded: covered when they come
#: again, never written a reply of their own; the simulator's finding F51)
WRITTEN = frozenset({Plan.SKIP_SENT, Plan.SKIP_AWAITING, Plan.SKIP_DECLINED, Plan.SKIP_SEND_FAILED})


def plan(record: ReplyRecord | None, *, replay: bool = False) -> Plan:
    if record is None:
        return Plan.WRITE
    match record.state:
        case ReplyState.SENT:
            return Plan.SKIP_SENT
        case ReplyState.COVERED:
            return Plan.SKIP_COVERED
        case ReplyState.DECLINED:
            return Plan.SKIP_DECLINED  # the writer's decision stands, replay or not
        case ReplyState.AWAITING:
            return Plan.SKIP_AWAITING  # sent once a person approves it, replay or not
        case ReplyState.FAILED if not replay:
            return Plan.SKIP_FAILED if record.reply_text is None else Plan.SKIP_SEND_FAILED
        case ReplyState.FAILED if record.reply_text is None:
            return Plan.WRITE  # the writer failed: a replay asks it again
    return Plan.RECONCILE


def ended_failed(record: ReplyRecord | None) -> bool:
    """Whether a message's reply ended failed (dead-lettered, its letter to retry): its
    event failed too, whatever the rest of its burst did. Read again with its record
    *failed* (a worker stopped between the letter and the event's outcome), it is skipped
    as done; recorded as a success, the letter's retry would be skipped as a duplicate
    and the message never answered (simulator finding F16)."""
    return record is not None and record.state is ReplyState.FAILED


def supersede(draft: ReplyRecord, by: str) -> ReplyRecord:
    """The draft, superseded by the reply to the newer message ``by``: *covered* by it, so
    a decision on it is refused naming ``by``, and its message is never answered twice."""
    return draft.with_state(ReplyState.COVERED, covered_by=by, reason=f"superseded by {by}")


def left_drafts(
    latest: ReplyRecord | None, records: Mapping[str, ReplyRecord | None]
) -> tuple[list[ReplyRecord], list[ReplyRecord]]:
    """The drafts still awaiting a decision beside ``latest`` (the burst's latest message's
    reply, written: a draft, pending, sent, declined or a failed send) whose messages it
    covers (``records``: the ledger records of its ``covers``): those it supersedes (every
    message the draft's writer saw, ``latest``'s saw too), and those left waiting.

    A newer message supersedes a waiting draft before its reply is written
    (``approval.applying.answer``), so the two never wait together, except where two
    late writers crossed: one landed its draft of an older message after the other, then
    owner, had written the newer message's reply covering it, and the owner's record
    superseding that draft never landed, or landed before the draft and F17's rule wrote
    the draft back (the simulator's finding F28). Both approved, the older message would be
    answered twice. A draft whose writer saw a message ``latest``'s did not is left (its
    message would be covered by a reply that never saw it)."""
    if latest is None or latest.state is ReplyState.COVERED or latest.reply_text is None:
        return [], []
    saw = {*(latest.covers or ())}
    superseded: list[ReplyRecord] = []
    left: list[ReplyRecord] = []
    for key in latest.covers or ():
        draft = records.get(key)
        if key == latest.key or draft is None or draft.state is not ReplyState.AWAITING:
            continue
        (superseded if saw.issuperset(draft.covers or ()) else left).append(draft)
    return superseded, left


def chain_end(
    get: Callable[[str], ReplyRecord | None], record: ReplyRecord | None, stop: Collection[str]
) -> str | ReplyRecord | None:
    """Where a *covered* record's chain ends (each record names the reply that covers it,
    which may be a superseded draft, covered in turn): the first key of ``stop`` it
    reaches; else the first record on it that is not *covered* (another reply); else None
    (``record`` is not *covered*, or the chain reaches a record not written yet or loops)."""
    if record is None or record.state is not ReplyState.COVERED:
        return None
    seen: set[str] = set()
    while record is not None and record.state is ReplyState.COVERED and record.covered_by:
        key = record.covered_by
        if key in stop:
            return key
        if key in seen:
            return None
        seen.add(key)
        record = get(key)
    return record if record is not None and record.state is not ReplyState.COVERED else None


def distinct(messages: Iterable[Inbound]) -> list[Inbound]:
    """``messages`` with each message once (its first delivery), in their order. One
    message may come in two deliveries with two event ids (its webhook and a catch-up's
    record, or a provider's retry under a new id): answered as two, the reply's writer
    would see it twice and the reply that covers the one would leave the other unseen,
    answered anew (the simulator's finding F26: a second email with keys ignored)."""
    seen: dict[str, Inbound] = {}
    for message in messages:
        seen.setdefault(message.key, message)
    return list(seen.values())


def burst_order(message: Inbound) -> tuple[datetime, str]:
    """A message's place in its burst: its payload time, then its event id."""
    return message.occurred_at, message.event_id


def split_burst(burst: Sequence[Inbound]) -> tuple[Inbound, tuple[Inbound, ...]]:
    """The message to answer (the latest) and the ones its reply covers."""
    messages = sorted(burst, key=burst_order)
    return messages[-1], tuple(messages[:-1])


@dataclass(frozen=True, slots=True)
class Division:
    """A burst's messages by what each is owed, each part oldest first."""

    #: no record: answered by one new reply, to the latest of them, whose writer sees them all
    write: tuple[Inbound, ...] = ()
    #: no record, older than the latest message's pending reply, which covers them
    cover: tuple[Inbound, ...] = ()
    #: a recorded reply each, sent with its stored text and key (the latest's last)
    finish: tuple[tuple[Inbound, Plan], ...] = ()
    #: answered, declined or failed before: nothing to do
    done: tuple[tuple[Inbound, Plan], ...] = ()
    #: the key of the latest message's pending reply, which covers :attr:`cover`
    covered_by: str | None = None


def divide(
    planned: Iterable[tuple[Inbound, Plan]], covers: Collection[str] | None = None
) -> Division:
    """Each message of a burst (with its :func:`plan`) by what it is owed; ``covers`` is
    what the latest message's recorded reply covers (None: a record from before version 3,
    which covers every older message with no record).

    A message that came twice (two events) is written with both, finished or done once.
    """
    pairs = sorted(planned, key=lambda pair: burst_order(pair[0]))
    unrecorded = tuple(m for m, step in pairs if step is Plan.WRITE)
    finish: dict[str, tuple[Inbound, Plan]] = {}
    done: dict[str, tuple[Inbound, Plan]] = {}
    for message, step in pairs:
        if step is not Plan.WRITE:
            (finish if step in FINISH else done).setdefault(message.key, (message, step))
    finished, handled = tuple(finish.values()), tuple(done.values())
    if pairs and (
        pairs[-1][1] in FINISH  # the latest message's reply is recorded, not yet sent
        or (pairs[-1][1] in WRITTEN and covers is not None)  # or is settled
    ):
        latest = pairs[-1][0].key
        seen = tuple(m for m in unrecorded if covers is None or m.key in covers)
        unseen = tuple(m for m in unrecorded if m not in seen)
        return Division(write=unseen, cover=seen, finish=finished, done=handled, covered_by=latest)
    return Division(write=unrecorded, finish=finished, done=handled)


def seen_unrecorded(
    burst: Sequence[Inbound], records: Mapping[str, ReplyRecord | None]
) -> list[tuple[Inbound, str]]:
    """Each message of ``burst`` with no record that a written reply of another of its
    messages covers (sent, a draft, declined, a failed send: ``WRITTEN``), with that
    reply's key. Its writer saw the message and was stopped before recording it covered:
    recorded so now, it is never given a reply of its own beside that one, wherever the
    reply's message is in the burst (the latest's, as :func:`divide` covers; or an earlier
    one's: the simulator's finding F52). Of several such replies, one that answers on its
    own (sent, or a failed send its letter's retry sends) comes before a draft, which a
    newer reply may rewrite with what it covers (a review's finding); then the newest."""
    found: dict[str, tuple[Inbound, str, bool]] = {}
    ordered = sorted(burst, key=burst_order)
    for message in ordered:
        record = records.get(message.key)
        if record is None or plan(record) not in WRITTEN:
            continue
        alone = record.state in (ReplyState.SENT, ReplyState.FAILED)
        for other in ordered:
            if other.key not in (record.covers or ()) or records.get(other.key) is not None:
                continue
            held = found.get(other.key)
            if held is None or alone or not held[2]:
                found[other.key] = (other, record.key, alone)
    return [(other, key) for other, key, _ in found.values()]


class Outcome(StrEnum):
    SENT = "sent"
    ALREADY = "already"  #: sent or covered before, or found in the thread; nothing to do
    FAILED = "failed"  #: dead-lettered
    DECLINED = "declined"  #: the writer chose not to answer
    AWAITING = "awaiting"  #: a draft recorded for a person to approve


@dataclass(frozen=True, slots=True)
class BurstResult:
    outcome: Outcome
    key: str
    sent_message_id: str | None = None
    #: a burst's result names one reply; this holds each reply's result (the one named too)
    parts: tuple[BurstResult, ...] = field(default=(), compare=False)


def already(message: Inbound, step: Plan, record: ReplyRecord | None) -> BurstResult:
    """The result for a message the ledger says is done."""
    outcome = Outcome.DECLINED if step is Plan.SKIP_DECLINED else Outcome.ALREADY
    outcome = Outcome.AWAITING if step is Plan.SKIP_AWAITING else outcome
    return BurstResult(outcome, message.key, record.sent_message_id if record else None)


_RANK = {
    Outcome.ALREADY: 0,
    Outcome.DECLINED: 1,
    Outcome.AWAITING: 1,
    Outcome.SENT: 2,
    Outcome.FAILED: 3,
}


def summarize(acted: Sequence[BurstResult], done: Sequence[BurstResult]) -> BurstResult:
    """The burst's one result: of the replies acted on now, a failure before a send before a
    decline before a reply found in the thread (the last acted on of equals); with none acted
    on, the latest done message's. ``parts`` holds every one."""
    if not acted and not done:
        raise ValueError("an empty burst has no result")
    named = sorted(acted, key=lambda r: _RANK[r.outcome])[-1] if acted else done[-1]
    return dataclasses.replace(named, parts=(*done, *acted))

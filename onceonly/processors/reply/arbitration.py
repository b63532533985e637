"""Arbitration in the ledger, where the fence cannot reach.

The fence (:mod:`onceonly.processors.fence`) asks the group before each ledger record and
each send. A worker paused *after* its check (the late zombie) still lands its records
in the ledger once it wakes: a *pending* record with a text of its own, or a *sent* one,
in the partition that another worker owns now. The log then orders the two writers, and
this module decides by that order:

* the first *pending* record of a key in the log owns the text: a writer whose own
  pending record landed later sends that text with the key, never its own (the mail
  API's idempotency record then holds one content for the key);
* a *sent* record of the key before the writer's own record means the email went out:
  nothing is sent, and the ledger records it *sent* as the other writer did; a *covered*
  or *declined* one means the key is settled: nothing is sent, and the ledger records it
  as the other writer did, unless it is *covered*, made before the writer's own reply was,
  by a reply the own reply covers (a late record whose cover is circular; the simulator's
  finding F34, :func:`covered_back`). The ledger writes that record again as soon as its
  own pending record has landed after it, unfenced (it only repeats the key's settled
  word), so that a zombie's pending record is never the key's last word in the compacted
  log (the simulator's finding F1: a later owner reading it *pending* sends it again);
* another writer's draft (*awaiting*) of the key before the writer's own late *failed*,
  *covered* or *awaiting* record, with nothing settled: if the fence, asked again, refuses,
  the draft is the owner's and is written again after it (F17; the ledger's ``_keep_draft``);
* another writer's record of a key this worker's store holds settled (*sent*, *covered*,
  *declined*) before that record landed, read from the topic whatever brought the read,
  and not itself settling (or *covered* or *declined* after this worker's *sent*; never
  over another writer's *sent*): the settled record is written again after it (F19; the
  ledger's ``_settle_again``). The
  late writer repeats the settled word itself when it can (above); a kill, or its lane
  cancelled by the drain right after its record landed, stops it first, so the owner does
  it, at its next write to the partition or its timer's audit (:meth:`TableLedger.audit`).

A worker cannot see another's records in its own store (it reads no changelog of a
partition it owns), so :class:`PartitionLog` keeps, per ledger partition, which offsets
it has accounted for: everything before the store's last applied offset at the first
write (what recovery read), each of its own writes after, and what a recovery read after
them (:meth:`PartitionLog.recovered`). An offset before its own record that is none of
these is another writer's: only then is the topic read (:meth:`PartitionLog.gaps`), and
what it held is kept (:meth:`PartitionLog.learn`). The log outlives rebalances: a
recovery accounts only for what came after the log's own writes, so a record another
writer landed between two of them stays to be read (the store's recovery reads it too:
its offset never moves past a record it has not applied). In the usual case no offset
is unaccounted for and arbitration reads nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from onceonly.processors.reply.bursts import chain_end
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import ReplyRecord, ReplyState, state_bytes


@dataclass(slots=True)
class PartitionLog:
    """The offsets of one ledger partition this worker has accounted for.

    ``known``: every offset below it is accounted for (recovered, written by this worker,
    or read). ``spans``: the offsets accounted for at or above ``known``, as disjoint
    ranges (first, last) in order; what lies between them is another writer's until read.
    ``foreign``: the other writers' records read from the topic, by key, with their offsets.
    """

    known: int
    spans: list[tuple[int, int]] = field(default_factory=list)
    foreign: dict[str, list[tuple[int, ReplyRecord]]] = field(default_factory=dict)

    def wrote(self, offset: int) -> None:
        """This worker's record landed at ``offset``."""
        self._account(offset, offset)

    def recovered(self, through: int) -> None:
        """The store applied every record after the last offset accounted for, up to
        ``through`` (a recovery read them). Offsets between this worker's records that are
        not its own stay unaccounted, and are read again if a record of this worker's
        comes after them."""
        top = self.spans[-1][1] if self.spans else self.known - 1
        if through > top:
            self._account(top + 1, through)

    def gaps(self, before: int) -> list[tuple[int, int]]:
        """The ranges (first, last) to read so that every offset below ``before`` is
        accounted for; empty when none is missing."""
        found: list[tuple[int, int]] = []
        at = self.known
        for first, last in self.spans:
            if at >= before or first >= before:
                break
            if first > at:
                found.append((at, first - 1))
            at = max(at, last + 1)
        if at < before:
            found.append((at, before - 1))
        return found

    def learn(
        self, records: Iterable[tuple[int, str, ReplyRecord | None]], first: int, last: int
    ) -> list[tuple[int, str, ReplyRecord]]:
        """What the topic held from ``first`` to ``last`` (offset, key, record; None for
        a tombstone or a value that is not a ledger record): the offsets not accounted for
        are another writer's. Returns those, in log order."""
        learned: list[tuple[int, str, ReplyRecord]] = []
        for offset, key, record in records:
            if not first <= offset <= last or record is None or self._accounted(offset):
                continue
            self.foreign.setdefault(key, []).append((offset, record))
            learned.append((offset, key, record))
        self._account(first, last)
        return learned

    def others(self, key: str) -> list[tuple[int, ReplyRecord]]:
        """Another writer's records of ``key`` read so far, in log order."""
        return sorted(self.foreign.get(key, ()), key=lambda item: item[0])

    def _accounted(self, offset: int) -> bool:
        return offset < self.known or any(a <= offset <= b for a, b in self.spans)

    def _account(self, first: int, last: int) -> None:
        first = max(first, self.known)
        if last < first:
            return
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.spans, (first, last)]):
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        if merged and merged[0][0] <= self.known:
            self.known = max(self.known, merged.pop(0)[1] + 1)
        self.spans = merged


class Ruling(StrEnum):
    OWN = "own"  #: no other writer's record comes first: send this one
    ADOPT = "adopt"  #: another writer's pending text came first: send that text
    SENT = "sent"  #: another writer recorded the reply sent first: send nothing
    #: another writer recorded the key covered or declined first (or, after a take-over,
    #: its draft or its failure: :func:`recovered_word`): send nothing
    SETTLED = "settled"


@dataclass(frozen=True, slots=True)
class Verdict:
    ruling: Ruling
    #: what to send (OWN, ADOPT) or what the ledger recorded again (SENT, SETTLED)
    record: ReplyRecord


def arbitrate(
    own: ReplyRecord,
    own_offset: int,
    others: Iterable[tuple[int, ReplyRecord]],
    get: Callable[[str], ReplyRecord | None] = lambda key: None,
) -> Verdict:
    """Decide ``own`` (a *pending* record at ``own_offset``) against another writer's
    records of the same key, by their order in the log (a late *covered* record naming a
    reply ``own`` covers settles nothing: :func:`covered_back`; nor does a draft's mark
    whose covering reply, as ``get`` reads the ledger, never saw it: :func:`unseen_mark`)."""
    first_pending: ReplyRecord | None = None
    ordered = [r for o, r in sorted(others, key=lambda item: item[0]) if o < own_offset]
    for at, other in enumerate(ordered):
        if other.state is ReplyState.SENT:
            return Verdict(Ruling.SENT, other)
        if other.state in (ReplyState.COVERED, ReplyState.DECLINED):
            if covered_back(own, other) or unseen_mark(get, own, other):
                continue
            if undone(own, ordered[at + 1 :]) or approved_over(get, own, other):
                continue
            return Verdict(Ruling.SETTLED, other)
        if other.state is ReplyState.PENDING and other.reply_text and first_pending is None:
            first_pending = other
    if first_pending is None or first_pending.reply_text == own.reply_text:
        return Verdict(Ruling.OWN, own)
    # that text answers what its writer saw (its covers), not what this one's saw: the rest
    # is answered anew (once.reply_once; the simulator's finding F21)
    adopted = replace(own, reply_text=first_pending.reply_text, covers=first_pending.covers)
    return Verdict(Ruling.ADOPT, adopted)


def recovered_word(own: ReplyRecord, word: ReplyRecord | None) -> Verdict:
    """Decide ``own`` (a *pending* record this worker recovered, not wrote) against
    ``word``, the key's record in the store once its partition was taken over: the same
    record, or the one the take-over wrote again after it (``own`` was a late last word,
    the simulator's finding F38). Sent: nothing is sent; a pending text: that one is
    sent; anything else (covered, declined, a draft waiting, failed): nothing is sent."""
    if word is None or word == own:
        return Verdict(Ruling.OWN, own)
    if word.state is ReplyState.SENT:
        return Verdict(Ruling.SENT, word)
    if word.state is ReplyState.PENDING and word.reply_text:
        return Verdict(Ruling.ADOPT, word)
    return Verdict(Ruling.SETTLED, word)


def covered_back(own: ReplyRecord, other: ReplyRecord) -> bool:
    """Whether ``other`` (another writer's record of ``own``'s key) is a *covered* record,
    made before ``own``'s reply was (its ``created_at``, which an approval keeps), that
    names as its cover a reply ``own`` covers. Such a record settles nothing: its writer
    made it before the rebalance (a late record), and ``own``'s writer, after, saw that
    reply's message and answers it with this one, which records it covered in turn; the
    cover is circular and no email would answer either (the simulator's finding F34)."""
    return (
        other.state is ReplyState.COVERED
        and other.covered_by in (own.covers or ())
        and other.made_at < own.created_at
    )


def undone(own: ReplyRecord, later: Iterable[ReplyRecord]) -> bool:
    """Whether a settling record was undone before ``own`` landed: ``own``'s approved draft
    (its approval) written again after it by the late writer that landed it
    (``ledger._keep_draft``: the approved draft is the owner's; F17, F31). Ruled settling,
    it would be written again over ``own``'s *failed* after a send past its writer's check
    (the simulator's finding F44: the email out, the ledger's last word a late mark)."""
    if own.approval is None:
        return False
    drafts = (ReplyState.PENDING, ReplyState.AWAITING)
    return any(r.state in drafts and r.approval == own.approval for r in later)


def approved_over(
    get: Callable[[str], ReplyRecord | None], own: ReplyRecord, other: ReplyRecord
) -> bool:
    """Whether ``other`` is a draft's mark (superseded, no approval) made before ``own``, a
    record of the draft approved: its writer, a worker past its fence check that never
    learned of the approval, superseded a draft the owner had since approved. Ruled
    settling, it is written again over the approved *pending* and the decision is lost;
    a take-over then finds the mark late (made before) and writes the *pending* again,
    which no one sends (the simulator's finding F45, seed 960002379). A mark whose covering
    reply (as ``get`` reads the ledger) is approved or sent and covers the message still
    settles: that reply answers it (a review's finding)."""
    if own.approval is None or other.state is not ReplyState.COVERED:
        return False
    if other.approval is not None or other.reply_text is None or other.made_at >= own.made_at:
        return False
    end = chain_end(get, other, ())
    answering = (ReplyState.PENDING, ReplyState.SENT)
    return not (
        isinstance(end, ReplyRecord) and end.state in answering and own.key in (end.covers or ())
    )


def unseen_cover(
    get: Callable[[str], ReplyRecord | None], mark: ReplyRecord | None
) -> ReplyRecord | None:
    """The reply that covers ``mark``, where its chain of covers ends, when ``mark`` is a
    draft marked superseded (no approval) whose message that reply never saw; else None.

    A draft is marked before the new message's writer is asked with its messages; the
    reply landed may be a late writer's that never saw them (the simulator's finding F32).
    A record from before version 3 (no ``covers``) saw every older one."""
    if mark is None or mark.state is not ReplyState.COVERED or mark.reply_text is None:
        return None
    if mark.approval is not None:
        return None
    end = chain_end(get, mark, ())
    if (
        isinstance(end, ReplyRecord)
        and end.covers is not None
        and mark.key not in end.covers
        and not (end.state is ReplyState.FAILED and end.reply_text is None)
    ):
        return end
    return None


def unseen_mark(
    get: Callable[[str], ReplyRecord | None], own: ReplyRecord, other: ReplyRecord
) -> bool:
    """Whether ``other`` (another writer's record of ``own``'s key) is an unseen mark
    (:func:`unseen_cover`) made before ``own`` was. Such a mark settles nothing: ``own``'s
    writer read it and wrote the draft anew for what that reply left unanswered
    (``applying._answer_anew``, F32); written again after ``own``, it would leave the
    message covered by a reply that never saw it (the simulator's finding F43, the mark a
    paused worker's)."""
    return other.made_at < own.created_at and unseen_cover(get, other) is not None


#: the states that settle a key: nothing follows them in the ledger but themselves
SETTLING = frozenset({ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED})


def late_last_words(
    rows: Sequence[tuple[int, bytes, bytes | None]],
) -> list[tuple[str, ReplyRecord]]:
    """The keys whose last record in ``rows`` (offset, key, value, in log order; a value
    None is a tombstone) is a late one, each with the record to write again after it.
    Only the keys :func:`may_be_late` picks are decoded.

    A record is late when it landed after a record of its key that was *made* after it:
    its writer built it, passed its fence check, and paused past its session (or was cut
    off) while the next owner wrote the key (settled it, or drafted or approved its reply).
    A writer makes a record only from what its store says of the key, and the next owner's
    records are all made after the late writer's check, which came before the rebalance;
    one worker writes a key's records one at a time, on its thread's lane; every record
    that legitimately follows another (a message answered anew, an approval) is made after
    it. A repair repeats a record with the time it was made: a repeat that lands after a
    newer record is late too. So the order of ``made_at`` (``written_at``, stamped by the
    ledger before its fence check) against the order in the log tells a late record from
    the others, as long as the writers' clocks agree to within a rebalance (seconds). (A
    reply's ``created_at`` does not: a draft's approval and its *sent* record keep the
    draft's.)

    What is written again is a record made after the late one (:func:`_word_again`).
    Nothing is returned for a key whose last record is *sent* (the email is the last
    word), nor for a late *covered* or *declined* record after a settled record other than
    *sent* (either settles it)."""
    found: list[tuple[str, ReplyRecord]] = []
    for key, values in may_be_late(rows).items():
        chain: list[ReplyRecord] = []
        for _, value in values:
            if value is None:
                chain.clear()  # a tombstone: what came before it is gone
            elif (record := decoded(value)) is not None:  # not an effect's record
                chain.append(record)
        if not chain or chain[-1].state is ReplyState.SENT:
            continue
        last = chain[-1]
        made_after = [r for r in chain[:-1] if r.made_at > last.made_at]
        if not made_after:
            continue
        again = _word_again(made_after)
        if last.state in SETTLING and again.state in _SETTLED_UNSENT:
            continue  # covered or declined over covered or declined: either settles it
        found.append((key.decode(errors="replace"), again))
    return found


_SETTLED_UNSENT = SETTLING - {ReplyState.SENT}


def _word_again(made_after: Sequence[ReplyRecord]) -> ReplyRecord:
    """Of the records made after a late one, the one to write again after it: the last
    *sent* (an email went out), else the one made last, the key's word before the late
    record landed (the owner's settled record, its draft or its draft approved, a message
    answered anew after a covered record)."""
    sent = [r for r in made_after if r.state is ReplyState.SENT]
    return sent[-1] if sent else max(made_after, key=lambda r: r.made_at)


#: the bytes of every *sent* record (ReplyRecord.encode's separators)
_SENT = state_bytes(ReplyState.SENT)


def may_be_late(
    rows: Sequence[tuple[int, bytes, bytes | None]],
) -> dict[bytes, list[tuple[int, bytes | None]]]:
    """The records read, by key, of the keys that may have a late last word: those with
    more than one record whose last is not *sent*. A take-over reads the last compaction
    lag of a partition (most keys a pending record, then its sent one), and decodes only
    these."""
    by_key: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for offset, key, value in rows:
        by_key.setdefault(key, []).append((offset, value))
    return {
        key: chain
        for key, chain in by_key.items()
        if len(chain) > 1 and not (chain[-1][1] is not None and _SENT in chain[-1][1])
    }


def stands_over(own: ReplyRecord, after: Sequence[ReplyRecord]) -> bool:
    """Whether ``own`` (the worker's record of a key) is still the key's word over
    ``after`` (other writers' records of it that landed after it, in log order), and is
    written again after them.

    Never after *sent* (an email went out). After ``own`` settled the key: always, but
    *covered* or *declined* after *covered* or *declined* (either settles it). After
    ``own`` is a draft, or its draft approved: when none after it is *sent* and every one
    was made before it (each is late, as :func:`late_last_words` finds one at a take-over;
    F17's and F31's repair when the late writer was stopped before it wrote the draft
    again). Not after
    any other own record: a *pending* one's send arbitrates the key; after a *failed* one,
    a record may be the next owner's draft for the dead letter an operator retried (F24)."""
    last = after[-1]
    if last.state is ReplyState.SENT:
        return False
    if own.state in SETTLING:
        return not (last.state in SETTLING and own.state is not ReplyState.SENT)
    if any(r.state is ReplyState.SENT for r in after):
        return False  # an email went out: never a draft over it (the take-over's word)
    return waits_on_person_or_send(own) and all(r.made_at < own.made_at for r in after)


def waits_on_person_or_send(record: ReplyRecord) -> bool:
    """A draft, waiting for a person or approved and on its way to be sent."""
    approved = record.state is ReplyState.PENDING and record.approval is not None
    return record.state is ReplyState.AWAITING or approved


def decoded(value: bytes | None) -> ReplyRecord | None:
    if value is None:
        return None
    try:
        return ReplyRecord.decode(value)
    except SchemaError:
        return None  # an effect's record or a stranger: not a reply's

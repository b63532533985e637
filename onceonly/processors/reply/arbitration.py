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
  nothing is sent, and the ledger records it *sent* as the other writer did.

A worker cannot see another's records in its own store (it reads no changelog of a
partition it owns), so :class:`PartitionLog` keeps, per ledger partition, which offsets
it has accounted for: everything before the store's last applied offset at the first
write (what recovery read), and each of its own writes after. An offset before its own
record that is neither is another writer's: only then is the topic read
(:meth:`PartitionLog.gap`), and what it held is kept (:meth:`PartitionLog.learn`).
In the usual case no offset is unaccounted for and arbitration reads nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from onceonly.schemas.ledger import ReplyRecord, ReplyState


@dataclass(slots=True)
class PartitionLog:
    """The offsets of one ledger partition this worker has accounted for.

    ``known``: every offset below it is accounted for (recovered, written by this worker,
    or read). ``own``: this worker's writes at or above ``known``. ``foreign``: the other
    writers' records read from the topic, by key, with their offsets.
    """

    known: int
    own: set[int] = field(default_factory=set)
    foreign: dict[str, list[tuple[int, ReplyRecord]]] = field(default_factory=dict)

    def wrote(self, offset: int) -> None:
        """This worker's record landed at ``offset``."""
        if offset < self.known:
            return
        self.own.add(offset)
        self._advance()

    def gap(self, before: int) -> tuple[int, int] | None:
        """The offsets (first, last) to read so that every offset below ``before`` is
        accounted for; None when none is missing."""
        self._advance()
        if self.known >= before:
            return None
        return self.known, before - 1

    def learn(self, records: Iterable[tuple[int, str, ReplyRecord | None]], last: int) -> None:
        """What the topic held from ``known`` up to ``last`` (offset, key, record; None
        for a tombstone or a value that is not a ledger record): the offsets not this
        worker's are another writer's."""
        for offset, key, record in records:
            if offset < self.known or offset in self.own or record is None:
                continue
            self.foreign.setdefault(key, []).append((offset, record))
        self.own = {o for o in self.own if o > last}
        self.known = max(self.known, last + 1)
        self._advance()

    def others(self, key: str) -> list[tuple[int, ReplyRecord]]:
        """Another writer's records of ``key`` read so far, in log order."""
        return sorted(self.foreign.get(key, ()), key=lambda item: item[0])

    def _advance(self) -> None:
        while self.known in self.own:
            self.own.discard(self.known)
            self.known += 1


class Ruling(StrEnum):
    OWN = "own"  #: no other writer's record comes first: send this one
    ADOPT = "adopt"  #: another writer's pending text came first: send that text
    SENT = "sent"  #: another writer recorded the reply sent first: send nothing


@dataclass(frozen=True, slots=True)
class Verdict:
    ruling: Ruling
    #: what to send (OWN, ADOPT) or to record (SENT)
    record: ReplyRecord


def arbitrate(
    own: ReplyRecord, own_offset: int, others: Iterable[tuple[int, ReplyRecord]]
) -> Verdict:
    """Decide ``own`` (a *pending* record at ``own_offset``) against another writer's
    records of the same key, by their order in the log."""
    first_pending: ReplyRecord | None = None
    for offset, other in sorted(others, key=lambda item: item[0]):
        if offset >= own_offset:
            break
        if other.state is ReplyState.SENT:
            return Verdict(Ruling.SENT, other)
        if other.state is ReplyState.PENDING and other.reply_text and first_pending is None:
            first_pending = other
    if first_pending is None or first_pending.reply_text == own.reply_text:
        return Verdict(Ruling.OWN, own)
    return Verdict(Ruling.ADOPT, replace(own, reply_text=first_pending.reply_text))

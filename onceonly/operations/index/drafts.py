"""Which drafts wait for a person: the change one ledger write makes to that list (pure).

A reply key's ledger records come in order (one key, one partition), so the list changes
by comparing a write with the one before it: a draft that stops awaiting (sent, rejected,
timed out, deleted) leaves the list, one that starts awaiting joins it, ordered by when it
was drafted (its ``created_at``, in UTC, as the key's text sorts).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

from onceonly.operations.index.layout import draft_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState


@dataclass(frozen=True, slots=True)
class DraftChange:
    remove: tuple[bytes, ...] = ()
    add: tuple[bytes, ...] = ()


def waiting_key(record: ReplyRecord) -> bytes:
    drafted = record.created_at.astimezone(UTC).isoformat(timespec="microseconds")
    return draft_key(drafted, record.key)


def change(before: ReplyRecord | None, after: ReplyRecord | None) -> DraftChange:
    """What one write (``after``; None: a tombstone) does to the drafts waiting."""
    was = before is not None and before.state is ReplyState.AWAITING
    now = after is not None and after.state is ReplyState.AWAITING
    remove = (waiting_key(before),) if was and before is not None else ()
    add = (waiting_key(after),) if now and after is not None else ()
    if remove == add:
        return DraftChange()
    return DraftChange(remove=remove, add=add)

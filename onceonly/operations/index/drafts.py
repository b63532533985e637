"""Which drafts wait for a person: the change one ledger write makes to that list (pure).

A reply key's ledger records come in order (one key, one partition), so the list changes
by comparing a write with the one before it: a draft that stops awaiting (sent, rejected,
timed out, deleted) leaves the list, one that starts awaiting joins it, ordered by when it
was drafted (its ``created_at``, in UTC, as the key's text sorts). The write before is
known by its ``draft`` key alone (kept under ``waiting/<reply key>``): no earlier record
is decoded again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from onceonly.operations.index.layout import draft_key
from onceonly.schemas.ledger import ReplyState


@dataclass(frozen=True, slots=True)
class DraftChange:
    remove: tuple[bytes, ...] = ()
    add: tuple[bytes, ...] = ()


def listed_as(key: str, data: Mapping[str, object] | None) -> bytes | None:
    """Where a ledger value (its JSON; None: a tombstone) is in the drafts' list, if it is."""
    if data is None or data.get("state") != ReplyState.AWAITING.value:
        return None
    drafted = datetime.fromisoformat(str(data["created_at"])).astimezone(UTC)
    return draft_key(drafted.isoformat(timespec="microseconds"), key)


def change(before: bytes | None, after: bytes | None) -> DraftChange:
    """What one write does to the drafts waiting: ``before`` and ``after`` are where the
    reply was listed before it and is listed after it (None: not waiting)."""
    if before == after:
        return DraftChange()
    return DraftChange(
        remove=() if before is None else (before,), add=() if after is None else (after,)
    )

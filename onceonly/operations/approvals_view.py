"""What the operator page shows of the drafts awaiting a person: rows and notices, pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from onceonly.schemas.ledger import ReplyRecord


@dataclass(frozen=True, slots=True)
class DraftRow:
    key: str
    thread_key: str
    message_id: str  #: the message the draft answers
    covers: tuple[str, ...]  #: the keys of the thread's other messages the writer saw
    reason: str
    drafted_at: str
    age: str
    text: str


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def draft_rows(drafts: Sequence[ReplyRecord], now: datetime) -> list[DraftRow]:
    """The drafts as the page lists them, oldest first (as given)."""
    return [
        DraftRow(
            key=r.key,
            thread_key=r.thread_key,
            message_id=r.message_id,
            covers=r.covers or (),
            reason=r.reason or "",
            drafted_at=r.created_at.isoformat(timespec="seconds"),
            age=_age((now - r.created_at).total_seconds()),
            text=r.reply_text or "",
        )
        for r in drafts
    ]


def decided_notice(query: Mapping[str, str]) -> str | None:
    """After a decision from the page: what became of it, from the redirect's query."""
    status, key, state = query.get("decided"), query.get("key", ""), query.get("state", "")
    if status is None:
        return None
    said = {
        "applied": "applied",
        "already": "changed nothing: the same decision was applied before",
        "refused": "refused: the reply is no longer a draft",
        "waiting": "recorded; not applied yet (no worker owns the thread's partition?)",
    }.get(status, status)
    return f"decision on {key[:80]}: {said}; the reply is {state[:40] or 'unknown'}"

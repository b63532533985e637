"""The holds table as its changelog has it: each held event an entry of its own
(``thread key, 0x00, event id``), deleted with a tombstone when settled
(onceonly/processors/reorder/holds.py)."""

from __future__ import annotations

from onceonly.foundation.settings import Settings
from onceonly.processors.reorder.holds import SEP
from tests.conftest import consume_all


def _entries(settings: Settings, thread_key: str) -> list[tuple[str, bytes | None]]:
    """The thread's entries' records in the holds changelog, in order: (event id, value)."""
    prefix = thread_key.encode() + SEP
    records = consume_all(settings, f"{settings.app_id}-holds-changelog")
    return [
        (r.key()[len(prefix) :].decode(), r.value())
        for r in records
        if r.key() is not None and r.key().startswith(prefix)
    ]


def held_changes(settings: Settings, thread_key: str) -> list[list[str]]:
    """The event ids the thread held after each change of its entries, oldest first (a
    repeat written again is no change). The changelog is what a worker flushed as it
    committed, not at once."""
    live: dict[str, bytes] = {}
    changes: list[list[str]] = []
    for event_id, value in _entries(settings, thread_key):
        before = dict(live)
        if value:
            live[event_id] = value
        else:
            live.pop(event_id, None)
        if live.keys() != before.keys():
            changes.append(list(live))
    return changes


def held_text(settings: Settings, thread_key: str) -> str:
    """What the thread holds now, as text (its entries' values)."""
    live: dict[str, bytes] = {}
    for event_id, value in _entries(settings, thread_key):
        if value:
            live[event_id] = value
        else:
            live.pop(event_id, None)
    return b"\n".join(live.values()).decode()

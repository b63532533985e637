"""The holds table as its changelog has it: each held event an entry of its own
(``holds.event_key``), deleted with a tombstone when settled
(onceonly/processors/reorder/holds.py)."""

from __future__ import annotations

from onceonly.foundation.settings import Settings
from onceonly.processors.reorder.holds import entry_of
from tests.conftest import consume_all


def _entries(settings: Settings, thread_key: str) -> list[tuple[str, bytes | None]]:
    """The thread's entries' records in the holds changelog, in order: (event id, value)."""
    thread = thread_key.encode()
    records = consume_all(settings, f"{settings.app_id}-holds-changelog")
    entries = [(entry_of(r.key() or b""), r.value()) for r in records]
    return [(e[1], value) for e, value in entries if e is not None and e[0] == thread]


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

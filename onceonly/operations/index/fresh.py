"""An index answer brought up to the topics' ends: what it held, then what it had not read
yet (pure). A command that acts on an answer (a decision on a draft, a retry of a dead
letter) reads the records the index has not read yet (the topic from the index's offsets
to its end: as many as the index is behind, a few while ``onceonly index --follow`` runs)
and lets them win, so that it acts on what a whole read of the topic would have found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from onceonly.operations.replay import DeadLetter, letters_with_outcomes
from onceonly.operations.trace.model import Record
from onceonly.schemas.dead_letter import RETRIED_KIND, noted_letters


def newest_value(key: str, indexed: bytes | None, unread: Iterable[Record]) -> bytes | None:
    """A ledger key's latest value: the last of the unread records with that key (None: a
    tombstone), else the index's. One key lives in one partition: the records' order
    within it is the order they were written."""
    wanted, value = key.encode(), indexed
    for record in unread:
        if record.key == wanted:
            value = record.value
    return value


def merge_letters(
    known: Iterable[DeadLetter], unread: Sequence[tuple[int, dict[str, Any]]]
) -> list[DeadLetter]:
    """The index's letters with the dead-letter topic's unread records applied: its new
    letters join (open unless a note among them closes them), its retry notes close the
    letters they name, whoever holds them. By offset."""
    closed: dict[int, str] = {}
    for _, value in unread:
        if value.get("kind") == RETRIED_KIND:
            for offset in noted_letters(value):
                closed[offset] = str(value.get("at", ""))
    merged = {x.offset: x for x in known}
    merged.update({x.offset: x for x in letters_with_outcomes(list(unread))})
    return sorted(
        (
            dataclasses.replace(x, retried_at=closed.get(x.offset, x.retried_at))
            for x in merged.values()
        ),
        key=lambda x: x.offset,
    )

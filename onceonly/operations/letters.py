"""Which dead letters an operator read finds: from the operator index when one is built
(the open letters, those asked for by id and the newest, with the records the index had
not read yet), else the whole dead-letter topic (every letter, open or closed).

A letter is open until a retry's note on the dead-letter topic names it
(:func:`onceonly.operations.replay.letters_with_outcomes`); the index keeps that list as
it reads the topic, so listing and retrying cost the open letters, not the topic's history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceonly.foundation.kafka import Connection
from onceonly.foundation.settings import Settings
from onceonly.operations.replay import DeadLetter, dead_letters


@dataclass(frozen=True, slots=True)
class Letters:
    letters: list[DeadLetter]  #: by offset
    source: str  #: what answered, for the person reading it
    #: every letter of the topic (a whole read); False: the open ones, those asked for
    #: by id and the newest (the index)
    complete: bool

    @property
    def open(self) -> list[DeadLetter]:
        return [x for x in self.letters if x.open]

    def shown(self, also: int | None = None) -> list[DeadLetter]:
        """What a list shows: every letter of a whole read; from the index the open ones,
        and ``also`` (the letter just retried, to say when) open or not."""
        if self.complete:
            return self.letters
        return [x for x in self.letters if x.open or x.offset == also]


def find_letters(settings: Settings, ids: Iterable[int] = ()) -> Letters:
    from onceonly.operations import index

    reason = index.no_index_reason(settings)
    if reason is None:
        answer = index.dead_letters(settings, ids)
        return Letters(answer.value, answer.line(), complete=False)
    found = dead_letters(Connection.from_settings(settings), settings.dead_letter_topic)
    return Letters(found, f"answered by reading the whole dead-letter topic ({reason})", True)

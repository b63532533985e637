"""What the end of a chaos run says about its newer faults: dead letters that name messages
which were answered all the same (target 0), and what became of the lost webhooks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KeyOf = Callable[[str, str], str]


def named_keys(letter: Mapping[str, Any], key_of: KeyOf) -> set[str]:
    """The reply keys a dead letter names: its record's key and its envelopes' messages."""
    keys: set[str] = set()
    if isinstance(letter.get("key"), str):
        keys.add(letter["key"])
    record = letter.get("record")
    if isinstance(record, Mapping) and isinstance(record.get("key"), str):
        keys.add(record["key"])
    for envelope in letter.get("envelopes") or []:
        if not isinstance(envelope, Mapping):
            continue
        account, message_id = envelope.get("account_id"), envelope.get("message_id")
        if isinstance(account, str) and isinstance(message_id, str):
            keys.add(key_of(account, message_id))
    return keys


def naming_answered(
    letters: Iterable[tuple[int, Mapping[str, Any]]],
    answered: Mapping[str, str],
    key_of: KeyOf,
) -> list[str]:
    """Each dead letter (offset, letter) that names an answered message, described;
    ``answered`` maps an answered message's reply key to its name."""
    out = []
    for offset, letter in letters:
        names = sorted(answered[k] for k in named_keys(letter, key_of) if k in answered)
        if names:
            check = letter.get("check", "?")
            out.append(f"offset {offset} ({check}) names answered " + ", ".join(names))
    return out


@dataclass(frozen=True)
class LostFigures:
    """The messages whose webhooks never came: answered at the end, and how."""

    lost: int
    answered: int  #: with an email of their own, or covered
    after_catch_up: int  #: whose email was sent after the catch-up began

    def rows(self) -> list[tuple[str, str]]:
        if not self.lost:
            return []
        return [
            (
                "webhooks lost",
                f"{self.lost:,} never delivered; {self.answered:,} answered at the end, "
                f"{self.after_catch_up:,} by an email sent after the catch-up began",
            )
        ]

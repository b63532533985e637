"""The model usage per day, inbox and model, kept as running sums while the ledger is read.

The operator page's "Model usage today" counts each reply once, by its latest ledger
record, on the day that record was written (UTC), as
:func:`onceonly.operations.costs.day_totals` does over the day's records. Read whole, that
is a day of the ledger on every page view (86 million records at 1,000 replies/s). The
index keeps the sums instead (``usage/<day>/<inbox>/<model>`` -> replies, input and output
tokens): a reply's new latest record takes back what its record before it counted and
counts its own, so the page reads one entry per inbox and model. A tombstone takes
nothing back: the tokens were spent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from onceonly.operations.index.layout import SEP, usage_key, usage_prefix
from onceonly.operations.index.store import IndexStore, Writes

Counts = tuple[int, int, int]  #: replies, input tokens, output tokens
Latest = Callable[[bytes], bytes | None]


def counted(data: dict[str, Any] | None) -> tuple[bytes, Counts] | None:
    """The sum a reply's ledger value (its JSON) counts in, and what it adds (None: it
    reports no usage, or names no inbox or day)."""
    if data is None:
        return None
    usage, inbox, created = data.get("usage"), data.get("inbox_id"), data.get("created_at")
    if not isinstance(usage, dict) or not isinstance(inbox, str) or not isinstance(created, str):
        return None
    try:
        model = str(usage["model"])
        tokens_in, tokens_out = int(usage["input"]), int(usage["output"])
    except (KeyError, TypeError, ValueError):
        return None
    return usage_key(created[:10], inbox, model), (1, tokens_in, tokens_out)


def _counts(raw: bytes | None) -> Counts:
    """A sum's stored value (None: no entry, nothing counted)."""
    if raw is None:
        return (0, 0, 0)
    replies, tokens_in, tokens_out = json.loads(raw)
    return int(replies), int(tokens_in), int(tokens_out)


def _add(writes: Writes, latest: Latest, key: bytes, counts: Counts, sign: int) -> None:
    now = _counts(writes.current(key, latest))
    after = tuple(a + sign * b for a, b in zip(now, counts, strict=True))
    if after[0] <= 0:
        writes.delete(key)
    else:
        writes.put(key, json.dumps(after).encode())


def replace(
    writes: Writes, latest: Latest, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    """A reply's latest value goes from ``before`` to ``after`` (their JSON; None: none)."""
    if (old := counted(before)) is not None:
        _add(writes, latest, *old, sign=-1)
    if (new := counted(after)) is not None:
        _add(writes, latest, *new, sign=1)


def day(store: IndexStore, day_text: str) -> list[tuple[str, str, Counts]]:
    """Each inbox's and model's sums on ``day_text`` (``YYYY-MM-DD``)."""
    out = []
    for key, value in store.scan(usage_prefix(day_text)):
        inbox, model = (p.decode() for p in key.split(SEP)[2:4])
        out.append((inbox, model, _counts(value)))
    return out

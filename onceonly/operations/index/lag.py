"""How far behind the topics the index is: its offsets against the partitions' ends (pure).

The index stores, per topic partition, the next offset it will read. The topics' high
watermarks say where they end now; the difference, summed, is how many records the index
has not read (a compacted topic's gaps counted as records: an upper bound). A partition
whose start passed the stored offset (retention deleted records the index never read)
is read from its start: those records are gone from the topics, the index says so in the
build's log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceonly.foundation.kafka import TopicRange


@dataclass(frozen=True, slots=True)
class Behind:
    """Records not yet in the index, per topic name; ``error``: the topics could not be read."""

    by_topic: Mapping[str, int]
    error: str | None = None

    @property
    def total(self) -> int:
        return sum(self.by_topic.values())

    @property
    def up_to_date(self) -> bool:
        return self.error is None and self.total == 0

    def line(self) -> str:
        """What an answer from the index says about its freshness."""
        if self.error is not None:
            return f"index lag unknown (the topics' ends could not be read: {self.error})"
        if self.total == 0:
            return "index is up to date with the topics"
        parts = ", ".join(f"{t}: {n}" for t, n in sorted(self.by_topic.items()) if n)
        return (
            f"index is {self.total} records behind the topics ({parts}): "
            "what was written since is not in this answer; is `onceonly index --follow` running?"
        )


def next_range(stored: int | None, current: TopicRange) -> TopicRange:
    """What to read of a partition (``current``: its start to its end now), from ``stored``."""
    start = current.start if stored is None else min(max(stored, current.start), current.end)
    return TopicRange(current.partition, start, current.end)


def lost(stored: int | None, current: TopicRange) -> int:
    """Records deleted from the topic before the index read them."""
    return 0 if stored is None else max(0, min(current.start, current.end) - stored)


def behind(stored: Mapping[int, int], current: list[TopicRange]) -> int:
    """Records of one topic not in the index (``stored``: partition -> next offset)."""
    return sum(next_range(stored.get(r.partition), r).count for r in current)

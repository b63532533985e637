"""``onceonly index``: read the topics into the index, from where it stopped, and follow them.

One pass reads every partition of every indexed topic from the offset the index stored
for it (none: the partition's start) to the partition's end as the pass found it, in
lists of up to 10,000 records (``read_batches``); each list is written with the offset it
reaches in one RocksDB batch, so a process stopped anywhere (killed, the machine gone)
loses nothing and reads nothing twice when it starts again. Following repeats the pass
every ``poll_s`` seconds. A topic that does not exist yet (a changelog before any worker
ran) is skipped until it does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from onceonly.foundation.kafka import (
    Connection,
    KafkaAdapterError,
    TopicRange,
    read_batches,
    topic_ranges,
)
from onceonly.foundation.settings import Settings
from onceonly.operations.index.lag import Behind, behind, lost, next_range
from onceonly.operations.index.layout import Topic
from onceonly.operations.index.store import IndexStore
from onceonly.operations.index.writes import plan
from onceonly.operations.trace.query import record_of

log = structlog.get_logger("onceonly.index")


def indexed_topics(settings: Settings) -> dict[Topic, str]:
    """Each role the index holds -> its topic's name under these settings."""
    return {
        Topic.DELIVERIES: settings.deliveries_topic,
        Topic.LEDGER: settings.ledger_topic,
        Topic.DEAD_LETTERS: settings.dead_letter_topic,
        Topic.DECISIONS: settings.decisions_topic,
        Topic.EVENTS: f"{settings.app_id}-events-changelog",
        Topic.HOLDS: f"{settings.app_id}-holds-changelog",
    }


class TopicEnds:
    """The indexed topics' ranges, asked of Kafka once and shared by the answers of one view
    (the operator page's sections, read side by side in threads): their freshness lines
    agree, and the page opens one pair of Kafka clients for them, not one per section."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[str, list[TopicRange] | None] | KafkaAdapterError | None = None

    def of(
        self, connection: Connection, topics: Iterable[str]
    ) -> dict[str, list[TopicRange] | None]:
        with self._lock:
            if self._found is None:
                try:
                    self._found = topic_ranges(connection, topics)
                except KafkaAdapterError as exc:  # every answer of the view says so
                    self._found = exc
            found = self._found
        if isinstance(found, KafkaAdapterError):
            raise found
        return found


def freshness(
    connection: Connection, settings: Settings, store: IndexStore, ends: TopicEnds | None = None
) -> Behind:
    """How many records of each topic the index has not read yet (the answer's caveat);
    ``ends``: the topics' ranges one view shares (none: asked now)."""
    names = indexed_topics(settings).values()
    try:
        found = topic_ranges(connection, names) if ends is None else ends.of(connection, names)
    except KafkaAdapterError as exc:
        return Behind({}, error=str(exc))
    return Behind(
        {
            name: 0 if current is None else behind(store.offsets(name), current)
            for name, current in found.items()
        }
    )


def _partition(
    connection: Connection, store: IndexStore, topic: Topic, name: str, want: TopicRange
) -> int:
    count = 0
    for msgs in read_batches(connection, name, want.partition, want.start, want.end - 1):
        records = [record_of(m) for m in msgs]
        store.write(plan(topic, records, store.get), name, want.partition, records[-1].offset + 1)
        count += len(records)
    # the end as the pass found it: a compacted topic's last offsets may hold no record
    store.write(plan(topic, [], store.get), name, want.partition, want.end)
    return count


@dataclass(frozen=True, slots=True)
class Pass:
    read: dict[str, int]  #: records read per topic
    seconds: float


def one_pass(connection: Connection, settings: Settings, store: IndexStore) -> Pass:
    """Read every indexed topic from the stored offsets to its end now."""
    started, read = time.monotonic(), {}
    topics = indexed_topics(settings)
    found = topic_ranges(connection, topics.values())
    for topic, name in topics.items():
        current = found[name]
        if current is None:
            log.info("index: topic not there yet, skipped this pass", topic=name)
            continue
        stored = store.offsets(name)
        read[name] = 0
        for partition in current:
            gone = lost(stored.get(partition.partition), partition)
            if gone:
                log.warning(
                    "index: records deleted from the topic before the index read them",
                    topic=name,
                    partition=partition.partition,
                    records=gone,
                )
            want = next_range(stored.get(partition.partition), partition)
            if want.count:
                read[name] += _partition(connection, store, topic, name, want)
    if any(read.values()):
        store.flush()
    return Pass(read, time.monotonic() - started)


def follow(
    settings: Settings,
    store: IndexStore,
    *,
    poll_s: float,
    keep_going: Callable[[], bool],
    on_pass: Callable[[Pass], None],
) -> None:
    """Passes, ``poll_s`` apart when a pass found nothing new, while ``keep_going()``."""
    connection = Connection.from_settings(settings)
    while keep_going():
        done = one_pass(connection, settings, store)
        on_pass(done)
        if not any(done.read.values()):
            time.sleep(poll_s)

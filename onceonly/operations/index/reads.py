"""The index's answers for the commands that act (approve, reject, retry) and the
operator page: one reply by key, the open dead letters, the recent skips.

A reply and the dead letters are brought up to the topics' ends with the records the
index has not read yet (:mod:`~onceonly.operations.index.fresh`): a decision or a retry
acts on what a whole read would have found, at the cost of the index's lag instead of
the topic's history. The recent skips are the newest ``limit`` records of each
partition of the decisions topic the index holds, and say how far behind it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from onceonly.foundation.kafka import (
    Connection,
    TopicMissing,
    ranges,
    read_batches,
)
from onceonly.foundation.settings import Settings
from onceonly.operations.index.answers import Answer, answered, opened
from onceonly.operations.index.fresh import merge_letters, newest_value
from onceonly.operations.index.lag import Behind, next_range
from onceonly.operations.index.layout import (
    OPEN_LETTERS_PREFIX,
    SEP,
    Topic,
    record_key,
    records_prefix,
    reply_key,
    retried_key,
    unpack,
)
from onceonly.operations.index.store import IndexStore
from onceonly.operations.replay import DeadLetter
from onceonly.operations.trace.assemble import decisions
from onceonly.operations.trace.model import Record, Skip
from onceonly.operations.trace.query import record_of
from onceonly.schemas.dead_letter import RETRIED_KIND, parse_record
from onceonly.schemas.ledger import ReplyRecord


def each_unread(connection: Connection, store: IndexStore, name: str) -> Iterator[Record]:
    """The records of topic ``name`` the index has not read yet (none: no such topic), one
    by one: a reader may fold them as they come instead of holding them."""
    try:
        current = ranges(connection, name, from_offset=0)
    except TopicMissing:
        return
    stored = store.offsets(name)
    for partition in current:
        want = next_range(stored.get(partition.partition), partition)
        if want.count:
            for msgs in read_batches(connection, name, want.partition, want.start, want.end - 1):
                yield from (record_of(m) for m in msgs)


def unread(connection: Connection, store: IndexStore, name: str) -> list[Record]:
    """The records of topic ``name`` the index has not read yet (none: no such topic)."""
    return list(each_unread(connection, store, name))


def caught_up(store: IndexStore, topic: str, count: int) -> Answer[None]:
    source = (
        f"the index at {store.path} and the {count} record(s) of {topic} it had not read "
        "yet (read from the topic)"
    )
    return Answer(None, Behind({topic: 0}), source, caught_up=True)


def reply(settings: Settings, key: str) -> Answer[ReplyRecord | None]:
    """The reply ``key``'s latest record as the ledger topic has it now (None: no such
    reply), from the index and the ledger records it has not read yet."""
    with opened(settings) as store:
        tail = unread(Connection.from_settings(settings), store, settings.ledger_topic)
        value = newest_value(key, store.get(reply_key(key)), tail)
        how = caught_up(store, settings.ledger_topic, len(tail))
    record = None if value is None else ReplyRecord.decode(value)
    return Answer(record, how.behind, how.source, caught_up=True)


def _letter(store: IndexStore, offset: int) -> DeadLetter | None:
    raw = store.get(record_key(Topic.DEAD_LETTERS, 0, offset))
    if raw is None:
        return None
    value = parse_record(unpack(raw).value)
    if value.get("kind") == RETRIED_KIND:
        return None  # a retry's note, not a letter
    at = store.get(retried_key(offset))
    return DeadLetter(offset, value, None if at is None else at.decode())


def _newest(store: IndexStore) -> DeadLetter | None:
    """The newest letter the index holds (a retry's ``missing_secret`` reads it)."""
    prefix = records_prefix(Topic.DEAD_LETTERS)
    for key, _ in store.backwards(prefix):
        found = _letter(store, int(key.rsplit(SEP, 1)[1]))
        if found is not None:
            return found
    return None


def _indexed_letters(store: IndexStore, ids: Iterable[int]) -> list[DeadLetter]:
    """The open letters, those ``ids`` name and the newest, each once, by offset."""
    offsets = [int(k.rsplit(SEP, 1)[1]) for k, _ in store.scan(OPEN_LETTERS_PREFIX)]
    found = {x.offset: x for o in dict.fromkeys([*offsets, *ids]) if (x := _letter(store, o))}
    if (newest := _newest(store)) is not None:
        found[newest.offset] = newest
    return sorted(found.values(), key=lambda x: x.offset)


def dead_letters(settings: Settings, ids: Iterable[int] = ()) -> Answer[list[DeadLetter]]:
    """The open dead letters, those ``ids`` name (open or not) and the newest, by offset,
    as the dead-letter topic has them now: the index and the records it has not read."""
    with opened(settings) as store:
        topic = settings.dead_letter_topic
        tail = unread(Connection.from_settings(settings), store, topic)
        known = _indexed_letters(store, ids)
        how = caught_up(store, topic, len(tail))
    letters = merge_letters(known, [(r.offset, parse_record(r.value)) for r in tail])
    return Answer(letters, how.behind, how.source, caught_up=True)


def newest_skips(store: IndexStore, partitions: Iterable[int], limit: int) -> list[Skip]:
    """The newest ``limit`` records of each partition of the decisions topic the index
    holds, as skips, newest first: what the scan reads of the topic's tails."""
    found: list[Record] = []
    for partition in partitions:
        prefix = records_prefix(Topic.DECISIONS) + f"{partition:06d}".encode() + SEP
        for n, (_, raw) in enumerate(store.backwards(prefix)):
            if n >= limit:
                break
            found.append(unpack(raw))
    return sorted(decisions(found), key=lambda s: s.at, reverse=True)[:limit]


def recent_skips(settings: Settings, limit: int) -> Answer[list[Skip]]:
    """The newest ``limit`` skips the index holds, newest first; says how far behind."""
    with opened(settings) as store:
        partitions = store.offsets(settings.decisions_topic)
        return answered(settings, store, newest_skips(store, partitions, limit))

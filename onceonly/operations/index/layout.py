"""How the index lays its entries out in RocksDB: the keys, and a topic record as bytes.

Every key is a namespace and its parts joined by a NUL byte (no id onceonly reads has one),
numbers zero-padded so that RocksDB's byte order is their order, and every lookup is one
prefix scan whose length is the answer's:

* ``rec/<topic>/<partition>/<offset>`` -> the record as the topic had it (:func:`pack`);
* ``by/<kind>/<id>/<topic>/<partition>/<offset>`` -> nothing: the record names the id;
* ``reply/<reply key>`` -> the reply's latest ledger value;
* ``draft/<drafted at>/<reply key>`` -> nothing: a draft awaiting a person, oldest first;
* ``waiting/<reply key>`` -> its ``draft`` key, while it waits;
* ``letter/<offset>`` -> nothing: a dead letter still open (no retry note names it);
* ``retried/<offset>`` -> when a retry note closed that letter (ASCII);
* ``inbox/<inbox id>/<message time>/<reply key>`` -> nothing: a message of the inbox the
  ledger recorded, at its own time (UTC, as the text sorts), kept when the reply's record
  is tombstoned: where a catch-up without --since starts is one seek back from a time;
* ``usage/<day>/<inbox id>/<model>`` -> the day's replies, input and output tokens (JSON),
  each reply counted by its latest record (:mod:`~onceonly.operations.index.usage`);
* ``offset/<topic name>/<partition>`` -> the next offset to read (ASCII).

Dead letters are named by their offset alone: the dead-letter topic has one partition
(``foundation/topics.py``), as ``onceonly dead-letters`` assumes.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from enum import StrEnum

from onceonly.operations.trace.model import Record

SEP = b"\x00"


class Topic(StrEnum):
    """The topics the index holds, by their role (a short tag in every key)."""

    DELIVERIES = "d"
    LEDGER = "l"
    DEAD_LETTERS = "x"
    DECISIONS = "s"
    EVENTS = "e"  #: the ``<app id>-events-changelog`` (dedupe entries)
    HOLDS = "h"  #: the ``<app id>-holds-changelog`` (the threads' buffers)


class Kind(StrEnum):
    """What an id is, for ``by`` entries."""

    REPLY = "reply"  #: a reply key
    MESSAGE = "msg"  #: a message id
    EVENT = "evt"  #: an event id, or a dedupe key (``provider:event_id``)
    THREAD = "thr"  #: a thread key


def _join(*parts: str) -> bytes:
    return "\x00".join(parts).encode()


def record_key(topic: Topic, partition: int, offset: int) -> bytes:
    return f"rec\x00{topic.value}\x00{partition:06d}\x00{offset:020d}".encode()


def records_prefix(topic: Topic) -> bytes:
    return _join("rec", topic.value, "")


def name_key(kind: Kind, ident: str, topic: Topic, partition: int, offset: int) -> bytes:
    where = f"{topic.value}\x00{partition:06d}\x00{offset:020d}"
    return f"by\x00{kind.value}\x00{ident}\x00{where}".encode()


def names_prefix(kind: Kind, ident: str, topic: Topic) -> bytes:
    return _join("by", kind.value, ident, topic.value, "")


def position_of(key: bytes) -> tuple[int, int]:
    """The partition and offset that end a ``rec`` or ``by`` key."""
    partition, offset = key.rsplit(SEP, 2)[-2:]
    return int(partition), int(offset)


def reply_key(key: str) -> bytes:
    return _join("reply", key)


def draft_key(drafted_at: str, key: str) -> bytes:
    return _join("draft", drafted_at, key)


def waiting_key(key: str) -> bytes:
    """Where the index keeps a waiting draft's ``draft`` key, by its reply key."""
    return _join("waiting", key)


DRAFTS_PREFIX = _join("draft", "")


def reply_of_draft(key: bytes) -> str:
    return key.rsplit(SEP, 1)[-1].decode()


def time_text(at: datetime) -> str:
    """A time as a key's text: UTC to the microsecond, one width, so the text sorts as the
    time does (a time without a zone is taken as UTC)."""
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def inbox_key(inbox_id: str, at: datetime, key: str) -> bytes:
    return _join("inbox", inbox_id, time_text(at), key)


def inbox_prefix(inbox_id: str) -> bytes:
    return _join("inbox", inbox_id, "")


def inbox_bound(inbox_id: str, at: datetime) -> bytes:
    """A key after every ``inbox`` entry of the inbox at or before ``at``, before any later."""
    return _join("inbox", inbox_id, time_text(at), "") + b"\xff"


def time_of_inbox_entry(key: bytes) -> datetime:
    return datetime.fromisoformat(key.split(SEP)[2].decode())


def open_letter_key(offset: int) -> bytes:
    return f"letter\x00{offset:020d}".encode()


OPEN_LETTERS_PREFIX = _join("letter", "")


def retried_key(offset: int) -> bytes:
    return f"retried\x00{offset:020d}".encode()


def usage_key(day: str, inbox_id: str, model: str) -> bytes:
    return _join("usage", day, inbox_id, model)


def usage_prefix(day: str) -> bytes:
    return _join("usage", day, "")


def offset_key(topic_name: str, partition: int) -> bytes:
    return _join("offset", topic_name, f"{partition:06d}")


_HEAD = struct.Struct(">iqqiiH")
_PAIR = struct.Struct(">HI")


def pack(record: Record) -> bytes:
    """A topic record as bytes: what :func:`unpack` reads back, exactly."""
    key, value = record.key, record.value
    out = [
        _HEAD.pack(
            record.partition,
            record.offset,
            record.timestamp_ms,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            len(record.headers),
        ),
        key or b"",
        value or b"",
    ]
    for name, data in record.headers:
        raw = name.encode()
        out += [_PAIR.pack(len(raw), len(data)), raw, data]
    return b"".join(out)


def unpack(data: bytes) -> Record:
    partition, offset, stamp, key_len, value_len, count = _HEAD.unpack_from(data)
    at = _HEAD.size
    key = None if key_len < 0 else data[at : at + key_len]
    at += max(key_len, 0)
    value = None if value_len < 0 else data[at : at + value_len]
    at += max(value_len, 0)
    headers = []
    for _ in range(count):
        name_len, data_len = _PAIR.unpack_from(data, at)
        at += _PAIR.size
        name = data[at : at + name_len].decode()
        at += name_len
        headers.append((name, data[at : at + data_len]))
        at += data_len
    return Record(partition, offset, stamp, key, value, tuple(headers))

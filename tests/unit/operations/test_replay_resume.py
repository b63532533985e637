"""A replay that stops says where; a second run takes up from there. No broker here: the
ranges, and a producer whose broker never answers (librdkafka's queue fills, then its
records time out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from onceonly.cli.replay import _stopped_note
from onceonly.foundation.kafka import ProduceFailed, TopicMissing, TopicRange
from onceonly.foundation.kafka._producer import BulkProducer, resume_offset
from onceonly.foundation.kafka._reader import format_ranges, parse_ranges, within


def test_ranges_are_written_and_read_back() -> None:
    ranges = [TopicRange(0, 1200, 5000), TopicRange(3, 0, 77)]

    assert format_ranges(ranges) == "0:1200-5000,3:0-77"
    assert parse_ranges(format_ranges(ranges)) == ranges


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0:10", "is not partition:from-to"),
        ("0:9-3", "ends after it starts"),
        ("1:0-5,1:6-9", "one per partition"),
        (" , ", "names no range"),
    ],
)
def test_ranges_that_do_not_parse_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_ranges(text)


def test_resumed_ranges_are_cut_to_what_the_topic_holds_now() -> None:
    current = [TopicRange(0, 500, 9000), TopicRange(1, 0, 40)]

    got = within([TopicRange(0, 100, 8000), TopicRange(1, 10, 50)], current)

    assert got == [TopicRange(0, 500, 8000), TopicRange(1, 10, 40)]
    with pytest.raises(TopicMissing, match="partition 7 is not in the topic"):
        within([TopicRange(7, 0, 1)], current)


def test_a_copy_resumes_at_the_first_record_not_acknowledged() -> None:
    assert resume_offset(100, None, None) == 100  # all taken and acknowledged
    assert resume_offset(100, 42, None) == 42  # 42 is still in flight
    assert resume_offset(100, 60, 50) == 50  # 50 was refused


@dataclass
class _Record:
    part: int
    at: int

    def partition(self) -> int:
        return self.part

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return b"v%d" % self.at

    def key(self) -> None:
        return None


def _record(partition: int, offset: int) -> Any:
    """A stand-in for a confluent Message read from the topic."""
    return _Record(partition, offset)


def test_a_full_queue_waits_and_a_broker_that_never_answers_stops_the_copy() -> None:
    producer = BulkProducer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # nothing listens
            "queue.buffering.max.messages": 2,
            "message.timeout.ms": 300,
        },
        wait_s=0.05,
    )
    producer.copy("t", _record(0, 10), None)  # a tick: not copied, done
    producer.copy("t", _record(0, 11), [("h", b"1")])
    producer.copy("t", _record(0, 12), [("h", b"1")])

    with pytest.raises(ProduceFailed, match="did not take the copy of 0:11"):
        producer.copy("t", _record(0, 13), [("h", b"1")])  # waits for room, then the refusal

    producer.flush(1)
    assert producer.acked == 0
    assert producer.left([TopicRange(0, 10, 20), TopicRange(1, 0, 5)]) == [
        TopicRange(0, 11, 20),
        TopicRange(1, 0, 5),
    ]


def test_a_stopped_replay_prints_the_command_that_goes_on() -> None:
    note = _stopped_note(225_000, [TopicRange(1, 100_000, 125_000)], "Ctrl-C or SIGTERM")

    assert note.startswith("replay stopped (Ctrl-C or SIGTERM): 225,000 records were copied")
    assert "25,000 are left" in note
    assert note.endswith("onceonly replay --resume 1:100000-125000")

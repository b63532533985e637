"""One view, one read of the topics' ends: the operator page's sections, read side by side in
threads, say one freshness line between them and ask Kafka for the ends once; answers
outside a view ask each time."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from onceonly.foundation.kafka import Connection, KafkaAdapterError, TopicRange
from onceonly.foundation.settings import Settings
from onceonly.operations.index import build, freshness, one_view
from onceonly.operations.index.answers import answered


class Store:
    """What freshness reads of an index: the next offset per topic partition."""

    path = Path("/nowhere")

    def offsets(self, topic_name: str) -> dict[int, int]:
        return {0: 3}


class Ends:
    """topic_ranges as the broker would answer: each topic 0..5 in partition 0; counts calls."""

    def __init__(self, error: KafkaAdapterError | None = None) -> None:
        self.calls = 0
        self.error = error
        self.lock = threading.Lock()

    def __call__(self, connection: Connection, topics: Any) -> dict[str, list[TopicRange] | None]:
        with self.lock:
            self.calls += 1
        if self.error is not None:
            raise self.error
        return {name: [TopicRange(0, 0, 5)] for name in topics}


@pytest.fixture
def ends(monkeypatch: pytest.MonkeyPatch) -> Ends:
    found = Ends()
    monkeypatch.setattr(build, "topic_ranges", found)
    return found


SETTINGS = Settings(kafka_bootstrap="localhost:1")


async def _sections(count: int) -> list[Any]:
    """``count`` answers read side by side in threads, as OpsPage.gather reads its sections."""
    store: Any = Store()
    reads = [asyncio.to_thread(answered, SETTINGS, store, n) for n in range(count)]
    return list(await asyncio.gather(*reads))


async def test_sections_read_in_one_view_ask_for_the_ends_once(ends: Ends) -> None:
    with one_view():
        found = await _sections(4)

    assert ends.calls == 1
    assert {a.behind.total for a in found} == {12}  # six topics, two records each


async def test_answers_outside_a_view_ask_for_the_ends_each_time(ends: Ends) -> None:
    await _sections(3)

    assert ends.calls == 3


async def test_a_view_whose_ends_cannot_be_read_says_so_in_every_section(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing = Ends(KafkaAdapterError("broker down"))
    monkeypatch.setattr(build, "topic_ranges", failing)

    with one_view():
        found = await _sections(3)

    assert failing.calls == 1
    assert all(a.behind.error == "broker down" for a in found)


def test_freshness_without_a_view_reads_the_ends_now(ends: Ends) -> None:
    store: Any = Store()

    assert freshness(Connection("localhost:1"), SETTINGS, store).total == 12
    assert ends.calls == 1

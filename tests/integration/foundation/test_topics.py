"""Topic administration on the real broker: idempotent creation, loud mismatches."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from aiokafka.partitioner import DefaultPartitioner

from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, TopicMismatch, TopicSpec
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs

pytestmark = pytest.mark.integration


def test_ensure_topics_creates_then_accepts_what_it_created(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=4)
    admin = Admin(Connection.from_settings(settings))

    first = admin.ensure_topics(topic_specs(settings))
    second = admin.ensure_topics(topic_specs(settings))

    assert [s.created for s in first] == [True, True, True, True]
    assert [s.created for s in second] == [False, False, False, False]
    assert (
        admin.topic_configs([settings.ledger_topic])[settings.ledger_topic]["cleanup.policy"]
        == "compact"
    )


def test_a_topic_with_another_partition_count_is_refused(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=4)
    admin = Admin(Connection.from_settings(settings))
    admin.ensure_topics(topic_specs(settings))
    wider = settings.model_copy(update={"partitions": 8})

    with pytest.raises(TopicMismatch, match=r"has 4 partitions, onceonly is configured for 8"):
        admin.ensure_topics(topic_specs(wider))


class _LaggingMetadata(Admin):
    """An Admin whose first metadata answer does not list ``hidden`` yet, as a broker that
    has not heard of a new topic answers."""

    def __init__(self, bootstrap: str, hidden: str) -> None:
        super().__init__(Connection(bootstrap))
        self.hidden: str | None = hidden

    def topic_shapes(
        self, timeout_s: float | None = None, led_only: bool = False
    ) -> dict[str, tuple[int, int]]:
        shapes = super().topic_shapes(timeout_s, led_only)
        if self.hidden is not None:
            shapes.pop(self.hidden, None)
            self.hidden = None
        return shapes


def test_a_topic_the_metadata_did_not_list_yet_is_checked_not_taken_as_created(
    kafka_bootstrap: str,
) -> None:
    name = f"deliveries-{uuid.uuid4().hex[:8]}"
    Admin(Connection(kafka_bootstrap)).ensure_topics(
        [TopicSpec(name, 2, config={"cleanup.policy": "delete"})]
    )
    lagging = _LaggingMetadata(kafka_bootstrap, hidden=name)

    with pytest.raises(TopicMismatch, match=r"has 2 partitions, onceonly is configured for 4"):
        lagging.ensure_topics([TopicSpec(name, 4, config={"cleanup.policy": "delete"})])


def test_a_ledger_that_is_not_compacted_is_refused(kafka_bootstrap: str) -> None:
    name = f"ledger-{uuid.uuid4().hex[:8]}"
    admin = Admin(Connection(kafka_bootstrap))
    admin.ensure_topics([TopicSpec(name, 2, config={"cleanup.policy": "delete"})])

    with pytest.raises(TopicMismatch, match=r"cleanup\.policy=delete, onceonly needs"):
        admin.ensure_topics([TopicSpec(name, 2, config={"cleanup.policy": "compact"})])


def test_the_topics_command_exits_non_zero_on_a_mismatch(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=2)
    Admin(Connection.from_settings(settings)).ensure_topics(topic_specs(settings))
    env = {
        **os.environ,
        "ONCEONLY_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ONCEONLY_DELIVERIES_TOPIC": settings.deliveries_topic,
        "ONCEONLY_LEDGER_TOPIC": settings.ledger_topic,
        "ONCEONLY_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        "ONCEONLY_DECISIONS_TOPIC": settings.decisions_topic,
        "ONCEONLY_PARTITIONS": "3",
    }

    done = subprocess.run(
        [sys.executable, "-m", "onceonly", "topics"], env=env, capture_output=True, text=True
    )

    assert done.returncode != 0
    assert "onceonly will not run on a wrong topic" in done.stderr


async def test_confluent_and_faust_put_a_key_on_the_same_partition(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
    producer_factory: Callable[[Settings], AsyncProducer],
) -> None:
    settings = topics_factory(settings_factory(partitions=8))
    producer = producer_factory(settings)
    every = list(range(8))
    faust_partition = DefaultPartitioner()

    for i in range(300):
        key = f"agentmail:thread-{uuid.uuid4().hex}-{i}".encode()
        delivered = await producer.produce(settings.deliveries_topic, b"{}", key=key)
        assert delivered.partition == faust_partition(key, every, every), key

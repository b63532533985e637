"""A worker started on a broker no consumer group has used yet joins without warnings.

The first group on a new cluster makes the broker create its offsets topic; a consumer
that asks for its coordinator meanwhile logs "Marking the coordinator dead" at WARNING,
three times or more, as `make run` on a new machine did. The worker waits for the
coordinator first (Admin.await_group_coordinator), by Kafka's error codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.broker import EmbeddedBroker
from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.conftest import own_topics
from tests.integration.processors.test_idle_worker import READY, loud_lines
from tests.integration.workers import Stack, until

pytestmark = pytest.mark.integration


@pytest.fixture
def new_broker(tmp_path: Path) -> Iterator[str]:
    """A broker of this test alone, on which no consumer group has been seen."""
    broker = EmbeddedBroker(tmp_path / "kafka", port=free_port(), heap_mb=512)
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


async def test_a_worker_on_a_broker_no_group_has_used_joins_without_a_warning(
    new_broker: str,
    producer_factory: Callable[[Settings], AsyncProducer],
    mail: FakeAgentMail,
    tmp_path: Path,
) -> None:
    settings = own_topics(new_broker, partitions=2, reorder_window_ms=0, own_app=True)
    admin = Admin(Connection.from_settings(settings))
    admin.ensure_topics(topic_specs(settings))
    assert "__consumer_offsets" not in admin.topic_partitions()  # no group seen yet
    stack = Stack(settings, producer_factory(settings), mail, tmp_path)

    worker = stack.worker()
    try:
        await until(stack, lambda: READY in worker.log(), "the worker ready", timeout_s=120)
        await stack.deliver(stack.seed("<fresh@example.com>", "thr-fresh"))
        await stack.until_sent(1)
    finally:
        worker.kill()  # not made by stack_factory, which kills its stacks' workers

    assert "Marking the coordinator dead" not in worker.log()
    assert not loud_lines(worker), "\n".join(loud_lines(worker))

"""Admin.ensure_topics waits out a broker that is not answering yet, for its patience.

A worker (or `onceonly topics`) started while the cluster restarts must not exit on the
first request that times out: on a busy machine one metadata request can outlast its
timeout while a node comes back. Asked with a one-second request timeout before the broker
has started, ensure_topics keeps asking until the broker answers.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from devstack.broker import EmbeddedBroker
from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, BrokerUnavailable, Connection, TopicSpec

pytestmark = pytest.mark.integration


def _admin(port: int) -> Admin:
    return Admin(Connection(bootstrap=f"127.0.0.1:{port}"), timeout_s=1.0)


def test_topics_are_made_once_a_late_broker_answers(tmp_path: Path) -> None:
    port = free_port()
    spec = TopicSpec(f"late-{uuid.uuid4().hex[:8]}", 1, {"cleanup.policy": "delete"})
    outcome: list[object] = []
    began = time.monotonic()

    def ensure() -> None:
        try:
            outcome.append(_admin(port).ensure_topics([spec], patience_s=120))
        except Exception as exc:  # the test reports it below
            outcome.append(exc)

    asking = threading.Thread(target=ensure)
    asking.start()
    time.sleep(2.5)  # more than two request timeouts pass with no broker at all
    assert outcome == [], "ensure_topics returned before any broker existed"
    with EmbeddedBroker(tmp_path, port=port, heap_mb=384):
        asking.join(timeout=90)
        assert not asking.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], list), outcome
    assert [status.name for status in outcome[0]] == [spec.name]
    assert time.monotonic() - began > 2.5


def test_a_broker_that_never_answers_is_reported_after_the_patience() -> None:
    port = free_port()
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        _admin(port).ensure_topics([TopicSpec("never", 1)], patience_s=3)
    waited = time.monotonic() - began
    assert 3 <= waited < 15, waited

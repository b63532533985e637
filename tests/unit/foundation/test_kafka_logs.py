"""librdkafka's log through ours: a run of failed connects is one "waiting for the broker" line."""

from __future__ import annotations

import logging

from onceonly.foundation.kafka._config import client_config
from onceonly.foundation.kafka._logs import BrokerWaitFilter, WaitState, is_broker_wait, wait_line

REFUSED = (
    "FAIL [rdkafka#producer-1] [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: "
    "Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"
)


def _record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("onceonly.kafka.x", level, __file__, 1, message, None, None)


def test_a_refused_connect_is_a_broker_wait() -> None:
    assert is_broker_wait(REFUSED)


def test_another_librdkafka_line_is_not_a_broker_wait() -> None:
    assert not is_broker_wait("MSGTIMEDOUT [rdkafka#producer-1] 3 messages timed out")


def test_the_first_failed_connect_says_waiting_for_the_broker() -> None:
    assert wait_line(WaitState(), 0.0, 30.0, "k:9092") == "waiting for the broker at k:9092"


def test_failed_connects_within_the_interval_are_dropped() -> None:
    state = WaitState()
    wait_line(state, 0.0, 30.0, "k:9092")

    assert wait_line(state, 29.0, 30.0, "k:9092") is None


def test_after_the_interval_one_line_counts_the_attempts_since() -> None:
    state = WaitState()
    wait_line(state, 0.0, 30.0, "k:9092")
    for t in (1.0, 2.0, 3.0):
        wait_line(state, t, 30.0, "k:9092")

    line = wait_line(state, 31.0, 30.0, "k:9092")

    assert line == "waiting for the broker at k:9092 (4 failed attempts since the last report)"


def test_the_filter_rewrites_a_failed_connect_as_a_warning() -> None:
    record = _record(REFUSED)

    assert BrokerWaitFilter("k:9092", clock=lambda: 0.0).filter(record)
    assert (record.getMessage(), record.levelno) == ("waiting for the broker at k:9092", 30)


def test_the_filter_drops_a_repeat_within_the_interval() -> None:
    wait = BrokerWaitFilter("k:9092", clock=lambda: 0.0)
    wait.filter(_record(REFUSED))

    assert not wait.filter(_record(REFUSED))


def test_the_filter_passes_other_lines_unchanged() -> None:
    record = _record("MSGTIMEDOUT 3 messages timed out")

    assert BrokerWaitFilter("k:9092").filter(record)
    assert record.getMessage() == "MSGTIMEDOUT 3 messages timed out"


def test_every_client_config_hands_librdkafka_our_logger() -> None:
    config = client_config("k:9092", **{"group.id": "g"})

    assert isinstance(config["logger"], logging.Logger)
    assert any(isinstance(f, BrokerWaitFilter) for f in config["logger"].filters)
    assert config["group.id"] == "g"


LOADING = (
    "GETPID [rdkafka#producer-4] [thrd:main]: Failed to acquire idempotence PID from broker "
    "127.0.0.1:9092/1: Broker: Coordinator load in progress: retrying"
)


def test_a_coordinator_loading_is_one_info_line_not_a_broker_wait() -> None:
    wait = BrokerWaitFilter("k:9092", clock=lambda: 0.0)
    record = _record(LOADING, logging.WARNING)

    assert wait.filter(record)
    assert (record.getMessage(), record.levelno) == (
        "the broker at k:9092 is loading a coordinator (retrying)",
        logging.INFO,
    )
    assert not wait.filter(_record(LOADING, logging.WARNING))  # its repeats collapse


def test_a_coordinator_loading_does_not_count_as_a_failed_connect() -> None:
    wait = BrokerWaitFilter("k:9092", clock=lambda: 0.0)
    wait.filter(_record(REFUSED))
    wait.filter(_record(LOADING))

    assert wait.state.suppressed == 0

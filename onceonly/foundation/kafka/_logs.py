"""librdkafka's own log, through Python's logging and so through structlog's format.

Every confluent-kafka client of onceonly gets ``"logger": client_logger(bootstrap)`` in
its config. librdkafka then queues its log lines for the client's ``poll()`` instead of
printing ``%3|…|FAIL|…`` lines to stderr. While the broker is not there (``make run``
before the broker is up, a broker restart), librdkafka logs a failed connect every
backoff, 20 a second; :class:`BrokerWaitFilter` turns each such run into one line,
"waiting for the broker at …", repeated at most every ``every_s`` with the count. A broker
that answers but is still loading a coordinator's state (a new cluster's first idempotent
producer or consumer group, a coordinator that moved) is a normal start, which librdkafka
retries by itself: one INFO line, "the broker at … is loading a coordinator".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

#: what librdkafka says while a broker is not (yet) accepting connections or requests
_NOT_READY = (
    "Connection refused",
    "Connect to ",
    "brokers are down",
    "Connection setup timed out",
)

#: what librdkafka says while a broker that answers loads a coordinator (it retries)
_LOADING = ("Coordinator load in progress",)

LOGGER_NAME = "onceonly.kafka"


def is_broker_wait(message: str) -> bool:
    """True for the lines librdkafka repeats while its broker is unreachable."""
    return any(marker in message for marker in _NOT_READY)


def is_coordinator_load(message: str) -> bool:
    """True for the lines librdkafka repeats while its broker loads a coordinator."""
    return any(marker in message for marker in _LOADING)


@dataclass(slots=True)
class WaitState:
    """The run of broker-wait lines seen so far: when it was last reported, and how many."""

    reported_at: float | None = None
    suppressed: int = 0


def wait_line(
    state: WaitState,
    now: float,
    every_s: float,
    bootstrap: str,
    saying: str = "waiting for the broker at {bootstrap}",
) -> str | None:
    """The line to print for one more broker-wait message, or None to drop it."""
    if state.reported_at is not None and now - state.reported_at < every_s:
        state.suppressed += 1
        return None
    line = saying.format(bootstrap=bootstrap)
    if state.reported_at is not None:
        line += f" ({state.suppressed + 1} failed attempts since the last report)"
    state.reported_at = now
    state.suppressed = 0
    return line


_LOADING_LINE = "the broker at {bootstrap} is loading a coordinator (retrying)"


class BrokerWaitFilter(logging.Filter):
    """Collapses librdkafka's repeated connect failures into "waiting for the broker"."""

    def __init__(
        self,
        bootstrap: str,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.every_s = every_s
        self.clock = clock
        self.state = WaitState()
        self.loading = WaitState()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if is_broker_wait(message):
            state, saying, level = (
                self.state,
                "waiting for the broker at {bootstrap}",
                logging.WARNING,
            )
        elif is_coordinator_load(message):
            state, saying, level = self.loading, _LOADING_LINE, logging.INFO
        else:
            return True
        line = wait_line(state, self.clock(), self.every_s, self.bootstrap, saying)
        if line is None:
            return False
        record.msg, record.args, record.levelno = line, None, level
        record.levelname = logging.getLevelName(level)
        return True


def client_logger(bootstrap: str) -> logging.Logger:
    """The logger a client for ``bootstrap`` hands to librdkafka (one per bootstrap)."""
    logger = logging.getLogger(f"{LOGGER_NAME}.{bootstrap}")
    if not any(isinstance(f, BrokerWaitFilter) for f in logger.filters):
        logger.addFilter(BrokerWaitFilter(bootstrap))
    return logger

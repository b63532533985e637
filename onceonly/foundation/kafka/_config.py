"""The settings every confluent-kafka client of onceonly starts from."""

from __future__ import annotations

from typing import Any

from onceonly.foundation.kafka._logs import client_logger


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Bootstrap, and librdkafka's log through our logging (one line while the broker is away).

    The caller must ``poll()`` the client now and then: that is where its log is served.
    """
    return {
        "bootstrap.servers": bootstrap,
        "logger": client_logger(bootstrap),
        # an idle connection the broker closes is not news
        "log.connection.close": False,
        **extra,
    }

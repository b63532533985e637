"""An asyncio face on confluent-kafka's Producer: ``await produce()`` resolves on the ack."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _ConfluentProducer

from onceonly.kafka.exceptions import ProduceFailed

#: The partitioner every producer in onceonly uses: murmur2 like the Java client and
#: aiokafka (faust), so a thread key lands on the same partition whoever produces it.
PARTITIONER = "murmur2_random"


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where the broker stored a record."""

    topic: str
    partition: int
    offset: int


def producer_config(
    bootstrap: str, *, timeout_ms: int, max_record_bytes: int, **extra: Any
) -> dict[str, Any]:
    """The settings every onceonly producer shares: durable, ordered, murmur2-partitioned."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "partitioner": PARTITIONER,
        # A record not acknowledged within the timeout is failed locally, so we never
        # report success for it; the webhook sender retries and dedupe absorbs repeats.
        "message.timeout.ms": timeout_ms,
        "linger.ms": 1,
        "message.max.bytes": max_record_bytes,
        "socket.connection.setup.timeout.ms": min(timeout_ms, 10_000),
        "reconnect.backoff.max.ms": 1000,
    }
    config.update(extra)
    return config


class AsyncProducer:
    """Produces records and awaits their acknowledgement without blocking the event loop.

    A daemon thread serves librdkafka's delivery callbacks; each callback resolves the
    asyncio future of its record on the loop that produced it.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._producer = _ConfluentProducer(config)
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-poll", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.05)

    async def produce(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> Delivered:
        """Send one record; return once the broker has it (acks=all), else raise ProduceFailed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Delivered] = loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                outcome: Delivered | Exception = ProduceFailed(
                    f"broker did not store the record on {topic}: {err.str()}; "
                    "check that the broker is up (onceonly broker) and retry"
                )
            else:
                outcome = Delivered(
                    str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
                )
            # a closed loop means nobody is waiting any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, outcome)

        kwargs: dict[str, Any] = {"key": key, "headers": list(headers), "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, value, **kwargs)
        except (BufferError, KafkaException) as exc:
            raise ProduceFailed(f"could not queue a record for {topic}: {exc}") from exc
        return await future

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding records; return how many are still undelivered."""
        return int(self._producer.flush(timeout_s))

    def close(self, timeout_s: float = 10.0) -> None:
        remaining = self.flush(timeout_s)
        self._closing.set()
        self._poller.join(timeout=2)
        if remaining:
            raise ProduceFailed(f"{remaining} records were not acknowledged before close")


def _settle(future: asyncio.Future[Delivered], outcome: Delivered | Exception) -> None:
    if future.done():  # the caller gave up (timeout or cancel)
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)

"""The dead-letter topic: one place builds every letter the worker writes.

A letter is JSON with ``reason`` (what failed, for a person), ``check`` (a short name:
``writer_failed``, ``send_failed``, ``record_failed``, ``not_an_envelope``,
``fetch_failed``, ``handler_failed``, ``effect_conflict``, ``bad_mac``), ``at``, and the
``envelopes`` that ``onceonly dead-letters retry`` sends through the pipeline again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from processors.metrics import WorkerMetrics
from schemas.envelope import Envelope
from schemas.ledger import ReplyRecord


class DeadLetters:
    def __init__(
        self, topic: Any, metrics: WorkerMetrics, clock: Callable[[], float], max_bytes: int
    ) -> None:
        self.topic = topic  #: a faust Topic (raw bytes)
        self.metrics = metrics
        self.clock = clock
        self.max_bytes = max_bytes

    async def _write(self, letter: dict[str, Any]) -> None:
        letter["at"] = datetime.fromtimestamp(self.clock(), tz=UTC).isoformat()
        value = json.dumps(letter, ensure_ascii=False).encode()
        if len(value) > self.max_bytes and letter.get("envelopes"):
            # too large for the broker: keep where the records are, not their bodies
            letter["envelopes_omitted"] = [
                {"event_id": e["event_id"], "provider": e["provider"]} for e in letter["envelopes"]
            ]
            letter["envelopes"] = []
            value = json.dumps(letter, ensure_ascii=False).encode()[: self.max_bytes]
        self.metrics.dead_letters.inc()
        fut = await self.topic.send(value=value)
        await fut  # acknowledged: only then is the record's offset committed

    async def record_unreadable(
        self,
        value: bytes | None,
        partition: int,
        offset: int,
        error: str,
        check: str = "not_an_envelope",
    ) -> None:
        await self._write(
            {
                "reason": error,
                "check": check,
                "partition": partition,
                "offset": offset,
                "value": (value or b"").decode("utf-8", "replace")[:65536],
            }
        )

    async def record_failure(
        self, envelopes: Sequence[Envelope], *, check: str, error: str
    ) -> None:
        await self._write(
            {
                "reason": f"{check}: {error}",
                "check": check,
                "last_error": error,
                "envelopes": [e.to_json() for e in envelopes],
            }
        )

    async def record_reply(
        self, record: ReplyRecord, reason: str, envelopes: Sequence[Envelope]
    ) -> None:
        check = "writer_failed" if reason.startswith("writer_failed") else "send_failed"
        await self._write(
            {
                "reason": reason,
                "check": check,
                "key": record.key,
                "attempts": record.attempts,
                "last_error": record.error,
                "record": json.loads(record.encode()),
                "envelopes": [e.to_json() for e in envelopes],
            }
        )

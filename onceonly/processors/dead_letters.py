"""The dead-letter topic: one place builds every letter the worker writes.

A letter is JSON with ``reason`` (what failed, for a person), ``check`` (a short name:
``writer_failed``, ``send_failed``, ``record_failed``, ``not_an_envelope``,
``fetch_failed``, ``handler_failed``, ``effect_conflict``, ``bad_mac``, ``retry_raced``),
``at``, and the ``envelopes`` that ``onceonly dead-letters retry`` sends through the
pipeline again. With ONCEONLY_ENVELOPE_SECRET each envelope's MAC goes beside it: the
topic has no MAC of its own, and a retry sends only envelopes whose MAC verifies. The
format is :mod:`onceonly.schemas.dead_letter`'s.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from onceonly.processors.metrics import WorkerMetrics
from onceonly.schemas.dead_letter import (
    Check,
    encode_letter,
    envelope_fields,
    failure_letter,
    reply_check,
    unreadable_letter,
)
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord


class DeadLetters:
    def __init__(
        self,
        topic: Any,
        metrics: WorkerMetrics,
        clock: Callable[[], float],
        max_bytes: int,
        mac_key: bytes | None = None,
    ) -> None:
        self.topic = topic  #: a faust Topic (raw bytes)
        self.metrics = metrics
        self.clock = clock
        self.max_bytes = max_bytes
        #: ONCEONLY_ENVELOPE_SECRET: each envelope of a letter carries its MAC under it
        self.mac_key = mac_key

    async def _write(self, letter: dict[str, Any]) -> None:
        letter["at"] = datetime.fromtimestamp(self.clock(), tz=UTC).isoformat()
        # too large for the broker: its ids are kept, not the bodies (see encode_letter)
        value = encode_letter(letter, self.max_bytes)
        self.metrics.dead_letters.inc()
        fut = await self.topic.send(value=value)
        await fut  # acknowledged: only then is the record's offset committed

    async def record_unreadable(
        self,
        value: bytes | None,
        partition: int,
        offset: int,
        error: str,
        check: Check = Check.NOT_AN_ENVELOPE,
    ) -> None:
        await self._write(unreadable_letter(value, partition, offset, error, check))

    async def record_failure(
        self, envelopes: Sequence[Envelope], *, check: Check, error: str
    ) -> None:
        await self._write(failure_letter(envelopes, check, error, self.mac_key))

    async def record_reply(
        self, record: ReplyRecord, reason: str, envelopes: Sequence[Envelope]
    ) -> None:
        await self._write(
            {
                "reason": reason,
                "check": reply_check(reason).value,
                "key": record.key,
                "attempts": record.attempts,
                "last_error": record.error,
                "record": json.loads(record.encode()),
                **envelope_fields(envelopes, self.mac_key),
            }
        )


def for_reply(
    letters: Any,
    claimed: Callable[[], Iterable[Envelope]],
    again: Callable[[Sequence[Any]], Sequence[Envelope]] | None = None,
) -> Callable[[ReplyRecord, str, Sequence[Any]], Awaitable[None]]:
    """The dead-letter step of one reply, into ``letters`` (:class:`DeadLetters`): its letter
    carries the envelopes, of those ``claimed`` gives when it fails (a rewrite claims
    more), of the messages it answers; with ``again``, those of the messages it answers
    that no claimed envelope carries (a superseded draft's, recalled from the thread), made
    again from their ledger records (simulator finding F13, seed 118)."""

    async def dead_letter(record: ReplyRecord, reason: str, messages: Sequence[Any]) -> None:
        envelopes = {envelope.event_id: envelope for envelope in claimed()}
        answered = [envelopes[m.event_id] for m in messages if m.event_id in envelopes]
        unclaimed = [m for m in messages if m.event_id not in envelopes]
        if again is not None and unclaimed:
            answered += again(unclaimed)
        await letters.record_reply(record, reason, answered)

    return dead_letter

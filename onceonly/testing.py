"""Test support for the code you give onceonly: your reply writer and your event handlers.

As ``structlog.testing`` does for logging, this module lets a test call your writer
the way the worker calls it, with no broker, worker or mail API:

```python
from onceonly import Decline
from onceonly.testing import call_writer, inbound

async def test_an_unsubscribe_is_declined() -> None:
    written = await call_writer(mywriter.reply, inbound("please unsubscribe me"))
    assert isinstance(written, Decline)
```

``make_burst`` gives a burst to call a writer with yourself. ``burst.effects`` is the
worker's own [`Effects`][onceonly.Effects] over an in-memory
ledger ([`MemoryLedger`][onceonly.testing.MemoryLedger]): an effect is performed once per
message and action, a repeat returns the recorded result, and the same action with another
payload raises [`EffectConflict`][onceonly.EffectConflict], exactly as in the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from onceonly.processors.effects.once import Effects
from onceonly.processors.writer.contract import Decline, Draft, Inbound, ThreadMessage
from onceonly.processors.writer.runner import Burst, Writer, WriterPolicy

__all__ = ["MemoryLedger", "call_writer", "inbound", "make_burst"]

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class MemoryLedger:
    """The ledger an [`Effects`][onceonly.Effects] writes, kept in a dict (``records``)."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}

    def get_raw(self, key: str) -> bytes | None:
        """The record stored under ``key``, or ``None``."""
        return self.records.get(key)

    async def put_raw(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` (in the worker: produced and acknowledged first)."""
        self.records[key] = value


def inbound(
    text: str | None,
    *,
    message_id: str = "<m1@example.com>",
    sender: str = "customer@example.com",
    subject: str | None = "Hello",
    thread_id: str = "thread-1",
    inbox_id: str = "agent@example.com",
    occurred_at: datetime = _EPOCH,
    labels: Iterable[str] = ("received",),
) -> Inbound:
    """One received message, as a writer is given it; every field but the text defaults."""
    return Inbound(
        inbox_id=inbox_id,
        message_id=message_id,
        thread_key=f"{inbox_id}:{thread_id}",
        thread_id=thread_id,
        event_id=f"evt-{message_id}",
        occurred_at=occurred_at,
        sender=sender,
        subject=subject,
        text=text,
        labels=tuple(labels),
    )


def _history(history: Iterable[ThreadMessage]) -> Callable[[], Awaitable[Sequence[ThreadMessage]]]:
    earlier = tuple(history)

    async def read_history() -> Sequence[ThreadMessage]:
        return earlier

    return read_history


def _effects(
    messages: Sequence[Inbound],
    ledger: MemoryLedger | None,
    now: Callable[[], datetime],
    loop: asyncio.AbstractEventLoop | None = None,
) -> Effects:
    """The latest message's effects, as the worker gives a writer, over ``ledger``."""
    return Effects(
        messages[-1].key, ledger if ledger is not None else MemoryLedger(), now, loop=loop
    )


def make_burst(
    *messages: Inbound,
    history: Iterable[ThreadMessage] = (),
    attempt: int = 1,
    ledger: MemoryLedger | None = None,
    now: Callable[[], datetime] = lambda: _EPOCH,
) -> Burst:
    """A burst of ``messages`` (oldest first) whose ``history()`` returns ``history`` and
    whose effects record in ``ledger`` (a new [`MemoryLedger`][onceonly.testing.MemoryLedger]
    if none is given)."""
    if not messages:
        raise ValueError("a burst holds at least one message: make_burst(inbound('...'))")
    effects = _effects(messages, ledger, now)
    return Burst(tuple(messages), effects=effects, attempt=attempt, _read_history=_history(history))


async def call_writer(
    writer: Callable[[Burst], Any],
    *messages: Inbound,
    history: Iterable[ThreadMessage] = (),
    ledger: MemoryLedger | None = None,
    attempts: int = 1,
    timeout_s: float = 120.0,
    now: Callable[[], datetime] = lambda: _EPOCH,
) -> str | Decline | Draft:
    """Call ``writer`` with ``messages`` through the worker's own writer runner: an async
    writer on this loop, a sync one in a thread (where ``history_sync`` and
    ``effects.once_sync`` work), timed out after ``timeout_s``, tried ``attempts`` times
    (with no backoff), its return value checked as the worker checks it. As in the worker,
    a sync call past its timeout runs on in its thread and keeps its one slot until it
    ends, so the next attempt waits for it. Returns the reply
    text (a ``str`` whose ``usage`` holds what the writer reported), a ``Decline``
    (``None`` becomes one) or a ``Draft``; raises the worker's
    [`WriterFailed`][onceonly.WriterFailed] (an [`OnceOnlyError`][onceonly.OnceOnlyError])
    where the worker would dead-letter the message."""
    if not messages:
        raise ValueError("call_writer(writer, inbound('...')): give at least one message")
    effects = _effects(messages, ledger, now, asyncio.get_running_loop())
    policy = WriterPolicy(
        concurrency=1,
        timeout_s=timeout_s,
        attempts=attempts,
        backoff_initial_s=0.0,
        backoff_max_s=0.0,
    )
    runner = Writer(writer, policy)
    try:
        return await runner.write(messages, effects=effects, history=_history(history))
    finally:
        runner.close()

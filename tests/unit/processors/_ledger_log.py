"""An in-memory ledger partition shared by several writers, for the ledger's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit.sim.log import OnePartitionStore

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def record(key: str, state: ReplyState, text: str | None = None, **changes: object) -> ReplyRecord:
    return ReplyRecord(key, "inbox", "<m@x>", "inbox:t", state, T0, text, **changes)  # type: ignore[arg-type]


class LogTable(OnePartitionStore):
    """A table whose changelog is a list shared with other writers (one partition). Its
    store's offset moves as faust's does: past each own write (``_on_changelog_sent``),
    and to the end when a recovery reads what came after it."""

    def __init__(self, topic: list[tuple[bytes, bytes]], recovered: int) -> None:
        super().__init__()
        self.topic = topic
        self.store.update(topic[:recovered])
        self.applied = recovered - 1
        #: the offsets a recovery read into the store
        self.read = set(range(recovered))
        #: set: a write's acknowledgement comes before its caller resumes
        self.hold: asyncio.Event | None = None

    async def write_through(
        self, key: bytes, value: bytes, partition: int | None = None
    ) -> tuple[int, int]:
        self.topic.append((key, value))
        self.store[key] = value
        offset = self.applied = len(self.topic) - 1
        if self.hold is not None:
            await self.hold.wait()
        return 0, offset

    async def delete_through(self, key: bytes, partition: int) -> tuple[int, int]:
        self.topic.append((key, None))  # type: ignore[arg-type]
        self.store.pop(key, None)
        self.applied = len(self.topic) - 1
        return 0, self.applied

    def recover(self) -> None:
        """A rebalance's recovery: the records after the store's offset, read into it."""
        for offset in range(self.applied + 1, len(self.topic)):
            key, value = self.topic[offset]
            self.store[key] = value
            self.read.add(offset)
        self.applied = len(self.topic) - 1


class Reads:
    def __init__(self, topic: list[tuple[bytes, bytes]]) -> None:
        self.topic = topic
        self.calls: list[tuple[int, int, int]] = []

    async def __call__(
        self, partition: int, first: int, last: int
    ) -> Iterator[tuple[int, bytes, bytes | None]]:
        self.calls.append((partition, first, last))
        return iter([(o, k, v) for o, (k, v) in enumerate(self.topic) if first <= o <= last])

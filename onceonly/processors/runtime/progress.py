"""The worker's progress in a few plain lines, in place of faust's box-drawn tables.

faust, mode and aiokafka log their start-up at INFO as tables of topics and offsets
(onceonly.foundation.logs keeps them at WARNING); these are the lines an operator needs instead:
joining the group, joined (with the partitions), tables recovered (with the counts),
ready. ``bench`` and ``chaos`` time a restart by them (:data:`MARKS`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import faust
import structlog

log = structlog.get_logger("onceonly.worker")

STARTING, JOINING, JOINED, RECOVERED, READY = (
    "worker starting",
    "joining the consumer group",
    "joined the consumer group",
    "tables recovered",
    "worker ready",
)
MARKS = (STARTING, JOINING, JOINED, RECOVERED, READY)


class ChangelogPartition(NamedTuple):
    topic: str
    partition: int


def partition_counts(tps: Iterable[Any]) -> dict[str, int]:
    """Topic name to the number of its partitions among ``tps``."""
    return dict(sorted(Counter(tp.topic for tp in tps).items()))


def recovery_counts(
    active: Iterable[ChangelogPartition],
    standby: Iterable[ChangelogPartition],
    highwaters: Mapping[ChangelogPartition, int],
) -> dict[str, Any]:
    """The figures of one recovery: partitions per changelog, and the records they hold."""
    active = list(active)
    return {
        "active_partitions": len(active),
        "standby_partitions": len(list(standby)),
        "changelogs": partition_counts(active),
        # a highwater is the last offset (-1: empty), so a partition holds highwater + 1
        "changelog_records": sum(max(0, highwaters.get(tp, -1) + 1) for tp in active),
    }


def log_recovery(recovery: Any) -> None:
    """Log faust's ``app.tables.recovery`` as it stands when a recovery completes."""

    def tps(items: Iterable[Any]) -> list[ChangelogPartition]:
        return [ChangelogPartition(tp.topic, tp.partition) for tp in items]

    highwaters = {
        ChangelogPartition(tp.topic, tp.partition): v
        for tp, v in recovery.active_highwaters.items()
    }
    counts = recovery_counts(tps(recovery.active_tps), tps(recovery.standby_tps), highwaters)
    log.info(RECOVERED, **counts)


def wire_progress(app: faust.App) -> None:
    """Log the group membership steps of ``app`` (recovery is logged by the worker)."""

    async def revoked(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        log.info(JOINING, group=app.conf.id, revoked=len(args[0]) if args else 0)

    async def assigned(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        log.info(JOINED, group=app.conf.id, partitions=partition_counts(args[0] if args else ()))

    app.on_partitions_revoked.connect(revoked)
    app.on_partitions_assigned.connect(assigned)


class Worker(faust.Worker):
    """faust's Worker, saying "worker starting" and "worker ready" in our format."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None  # it writes cursor codes to the terminal at start-up

    async def on_first_start(self) -> None:
        log.info(STARTING, app=self.app.conf.id)
        await super().on_first_start()

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        log.info(READY, app=self.app.conf.id)

"""Lanes: each conversation's work in order, conversations independent of each other.

A *lane* is one thread key's queue of jobs and the task that runs them, one after the
other. Lanes run concurrently, so a slow model call in one conversation holds up no
other conversation, on the same partition or not. A lane's task ends when its queue is
empty; an idle conversation costs nothing.

A job carries the Kafka records it finishes. They are acknowledged when the job is done
(faust then commits each partition up to its oldest record not yet acknowledged, so a
crash never skips an unfinished record, and a finished one that comes again is skipped
by dedupe). A job that ends with :class:`Dropped` is left unacknowledged: its records
come back after the rebalance or restart that dropped it.

Backpressure: :meth:`Lanes.submit` waits while ``max_pending`` records (or releases of
held buffers) are taken and not yet finished, so a slow model cannot make the worker
read the topic, or release held threads, without end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from onceonly.processors.exceptions import BrokerUnavailable, ProcessorError

log = structlog.get_logger("onceonly.lanes")


class Dropped(ProcessorError):
    """A job gave up without finishing (a rebalance began): its records stay unacknowledged."""


@dataclass(eq=False)
class Job:
    """One unit of a lane's work and the records it finishes."""

    run: Callable[[Job], Awaitable[None]]
    records: list[Any] = field(default_factory=list)
    #: what kind of job, for those that look into a lane's queue (``deliver``, ``release``)
    kind: str = "deliver"
    #: whatever the job's creator keeps with it (the pipeline: the envelope and position)
    item: Any = None

    @property
    def weight(self) -> int:
        """What the job counts against ``max_pending``: its records, and at least one (a
        release of held events carries no record, but its buffer is work in flight)."""
        return max(1, len(self.records))


Ack = Callable[[Any], Awaitable[None] | None]
Forget = Callable[[Iterable[Any]], None]
#: takes on a record whose held delivery's changelog write the broker refused
Refused = Callable[[BaseException], Awaitable[None]]


class Lanes:
    """Thread key -> lane; see the module's docstring."""

    def __init__(
        self,
        *,
        ack: Ack,
        forget: Forget = lambda records: None,
        on_fatal: Callable[[BaseException], None] | None = None,
        max_pending: int = 4096,
    ) -> None:
        self._ack = ack
        self._forget = forget
        self._on_fatal = on_fatal
        self.max_pending = max_pending
        self._queues: dict[bytes, deque[Job]] = {}
        self._tasks: dict[bytes, asyncio.Task[None]] = {}
        self._pending = 0  #: records taken and not yet finished or dropped
        self._room = asyncio.Event()
        self._room.set()
        self._open = True
        #: acknowledgements waiting for a held delivery's changelog write
        self._landing: set[asyncio.Task[None]] = set()
        self._drains = 0  #: drains begun: a refusal met after one is the next owner's

    # -- what the agent loop does ----------------------------------------------------
    async def submit(self, key: bytes, job: Job) -> None:
        """Queue ``job`` on ``key``'s lane; waits while too many records are pending."""
        while self._pending >= self.max_pending and self._open:
            self._room.clear()
            await self._room.wait()
        self._pending += job.weight
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._tasks and self._open:
            self._tasks[key] = asyncio.get_running_loop().create_task(
                self._lane(key), name=f"onceonly.lane:{key[:60]!r}"
            )

    async def ack_now(self, record: Any) -> None:
        """Acknowledge a record the agent loop finished itself (a tick, a held delivery)."""
        outcome = self._ack(record)
        if outcome is not None:
            await outcome

    def ack_landed(
        self, record: Any, landed: Awaitable[object], refused: Refused | None = None
    ) -> None:
        """Acknowledge ``record`` once ``landed`` completes (a held delivery's changelog
        write): the agent loop goes on meanwhile. The broker away past the producer's
        timeout (:class:`BrokerUnavailable`) is the worker's failure: ``on_fatal``, and the
        record is read again. Any other failure is the write's own (the broker refused the
        record: too large for the topic, say): ``refused`` takes the record on, which is
        not acknowledged here (without it, that too is the worker's failure)."""
        landing = self._ack_landed(record, landed, refused, self._drains)
        task = asyncio.get_running_loop().create_task(landing)
        self._landing.add(task)
        task.add_done_callback(self._landing.discard)

    async def _ack_landed(
        self, record: Any, landed: Awaitable[object], refused: Refused | None, drains: int
    ) -> None:
        try:
            await landed
        except Exception as exc:
            if refused is None or isinstance(exc, BrokerUnavailable):
                log.error("a held delivery's changelog write failed", error=repr(exc))
                if self._on_fatal is not None:
                    self._on_fatal(exc)
            elif self._drains == drains:  # one record's refusal: an exit would meet it again
                await refused(exc)
            else:  # a rebalance began meanwhile: the record is read again, by its owner
                log.info("a held delivery's refused write met after a drain", error=repr(exc))
            return
        await self.ack_now(record)

    # -- what a running job may do ---------------------------------------------------
    def queued(self, key: bytes, kind: str = "deliver") -> list[Job]:
        """The jobs of ``kind`` waiting on ``key``'s lane (not started), oldest first."""
        return [job for job in self._queues.get(key, ()) if job.kind == kind]

    def absorb(self, key: bytes, into: Job, jobs: Iterable[Job]) -> None:
        """Take waiting ``jobs`` off the lane: their records are finished with ``into``."""
        queue = self._queues.get(key)
        for job in jobs:
            if queue is not None and job in queue:
                queue.remove(job)
                into.records.extend(job.records)

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def active(self) -> int:
        return len(self._tasks)

    # -- rebalances and shutdown -----------------------------------------------------
    async def drain(self, grace_s: float) -> int:
        """Stop taking jobs; let the running ones finish for up to ``grace_s``; drop the rest.

        Dropped jobs' records are not acknowledged (``forget`` tells the consumer to stop
        waiting for them): they are read again from the committed offset. Returns how
        many records were dropped. The lanes open again for the next assignment.
        """
        self._open = False
        self._drains += 1
        self._room.set()
        for queue in self._queues.values():  # not started: drop now
            while queue:
                self._drop(queue.popleft())
        tasks = list(self._tasks.values())
        late: set[asyncio.Task[None]] = set()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=5)
        self._tasks.clear()
        self._queues.clear()
        lost = self._pending
        self._pending = 0
        self._open = True
        self._room.set()
        stuck = sum(1 for task in late if not task.done())  # a cancel its work swallowed
        if stuck:
            log.error("lanes drained; cancelled work still running", still_running=stuck)
        if lost:
            log.info(
                "lanes drained", records_dropped=lost, cancelled=len(late), still_running=stuck
            )
        return lost

    def _drop(self, job: Job) -> None:
        self._forget(job.records)

    # -- the lane's task ---------------------------------------------------------------
    async def _lane(self, key: bytes) -> None:
        queue = self._queues[key]
        try:
            while queue and self._open:
                job = queue.popleft()
                try:
                    await job.run(job)
                except Dropped as exc:
                    log.info("job dropped; its records will be read again", reason=str(exc))
                    self._drop(job)
                    self._settle(job)
                    continue
                except asyncio.CancelledError:  # drained: read again after the rebalance
                    self._drop(job)
                    raise
                except BaseException as exc:  # the pipeline handles a record's failures
                    log.exception("a lane's job escaped its own error handling")
                    if self._on_fatal is not None:
                        self._on_fatal(exc)
                    raise
                for record in job.records:
                    await self.ack_now(record)
                self._settle(job)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]
                if not queue:
                    self._queues.pop(key, None)
                elif self._open:  # a job came in as the task was ending
                    self._tasks[key] = asyncio.get_running_loop().create_task(self._lane(key))

    def _settle(self, job: Job) -> None:
        self._pending = max(0, self._pending - job.weight)
        if self._pending < self.max_pending:
            self._room.set()

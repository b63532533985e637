"""The fence: a worker that lost a partition writes and sends nothing more for it.

A worker paused past its session (a GC pause, a frozen VM, a partition that heals) wakes
with model calls finishing and no idea that the group gave its partitions to another
worker, which is answering the same records. Before each ledger record, before each
send and before it records how a burst's events ended (their dedupe entries: a lost
worker's *succeeded* would stand for the owner's *failed*, simulator finding F16), the
worker asks the group coordinator whether it still owns the partition of the record it
works for
(:meth:`onceonly.processors.runtime.consumer.TrackingConsumer.confirm_owner`: a commit with
the member's generation, refused once that generation has ended). A refusal raises
:class:`~onceonly.processors.exceptions.Fenced`: the lane stands down, its records
unacknowledged.

No fence reaches past its own check: a pause between the confirmation and the moment a
send's request leaves the worker still sends (the mail API's idempotency key is then
what keeps it to one email). :attr:`Fence.to_send` times that gap for every send.

The coordinator's answer is about the member and its generation, not one partition, so
the checks of a worker share rounds (:class:`Rounds`): one commit in flight at a time,
and every check asked meanwhile is answered by the next one, which starts after it asked.
A backlog's thousands of checks cost a commit per round trip, not a commit each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import structlog

from onceonly.processors.exceptions import Fenced
from onceonly.processors.reply.once import MailSender
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.fence")


class Partition(Protocol):
    """A partition as the runtime names it (faust's ``TP``): its topic and number."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


#: the partition and group generation of the record being worked on
Position = tuple[Partition, int]
Confirm = Callable[[Partition, int], Awaitable[bool]]

A = TypeVar("A")
R = TypeVar("R")


class Rounds(Generic[A, R]):
    """Shares one call of ``ask`` among the callers that wait for it, in rounds.

    A caller is answered by a round that started after it called: with no round running it
    starts one; while one runs, it joins the next, which starts when the running one ends
    (with the argument of the first caller to join it). At most one call runs at a time.
    An exception from ``ask`` reaches every caller of its round.
    """

    def __init__(self, ask: Callable[[A], Awaitable[R]]) -> None:
        self._ask = ask
        self._running = False
        self._next: tuple[asyncio.Future[R], A] | None = None
        self._task: asyncio.Future[None] | None = None
        self.rounds = 0  #: rounds started

    async def __call__(self, argument: A) -> R:
        if not self._running:
            answer: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._start(answer, argument)
        elif self._next is None:
            answer = asyncio.get_running_loop().create_future()
            self._next = (answer, argument)
        else:
            answer = self._next[0]
        return await asyncio.shield(answer)

    def _start(self, answer: asyncio.Future[R], argument: A) -> None:
        # a round whose every waiter was cancelled still ends: its exception is not lost noise
        answer.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._running = True
        self.rounds += 1
        self._task = asyncio.ensure_future(self._round(answer, argument))

    async def _round(self, answer: asyncio.Future[R], argument: A) -> None:
        try:
            answer.set_result(await self._ask(argument))
        except asyncio.CancelledError:  # the loop is closing: so are the round's waiters
            answer.cancel()
            raise
        except Exception as exc:
            answer.set_exception(exc)
        finally:
            self._running = False
            if self._next is not None:
                following, self._next = self._next, None
                self._start(*following)


class Fence:
    """Checks ownership of the current record's partition; raises :class:`Fenced` if lost."""

    def __init__(
        self,
        confirm: Confirm,
        current: Callable[[], Position | None],
        *,
        on_fenced: Callable[[], None] = lambda: None,
        on_gap: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self._confirm = confirm
        self._current = current
        self._on_fenced = on_fenced
        self._on_gap = on_gap

    async def check(self, before: str) -> float:
        """Confirm ownership before ``before`` (for the log); returns when it was confirmed
        (monotonic seconds). Work with no current record (a tool, a test) is not fenced."""
        position = self._current()
        if position is None:
            return time.monotonic()
        tp, generation = position
        if not await self._confirm(tp, generation):
            self._on_fenced()
            log.warning(
                "partition no longer ours; standing down",
                before=before,
                topic=tp.topic,
                partition=tp.partition,
                generation=generation,
            )
            raise Fenced(
                f"this worker no longer owns partition {tp} (generation {generation}): "
                f"nothing is written or sent for it; its owner answers the record"
            )
        return time.monotonic()

    def sender(self, inner: MailSender) -> MailSender:
        """``inner`` with the fence checked before each send."""
        return FencedSender(inner, self)

    def gap(self, seconds: float) -> None:
        self._on_gap(seconds)


class FencedSender:
    """A mail sender that confirms ownership right before each send."""

    def __init__(self, inner: MailSender, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence

    async def reply(self, record: ReplyRecord) -> str:
        confirmed = await self.fence.check("send")
        self.fence.gap(time.monotonic() - confirmed)
        return await self.inner.reply(record)

    async def find_reply(self, record: ReplyRecord) -> str | None:
        return await self.inner.find_reply(record)

"""What a simulated member's reply path is given (``ReplyParts``): its fenced sender, its
writer, its dead letters and the newer messages of the thread a reply takes in, as the
worker's ``Conversation`` gives them."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from onceonly.processors.approval.decisions import by_mode
from onceonly.processors.reply.bursts import distinct
from onceonly.processors.reply.once import MailSender, ReplyParts, SendPolicy
from onceonly.processors.writer.contract import Decline, Draft, Inbound
from onceonly.schemas.approval import ApprovalDecision
from onceonly.schemas.ledger import ReplyRecord
from testkit.sim.holding import Release
from testkit.sim.letters import Item, Resent
from testkit.sim.mail import MemberMail

if TYPE_CHECKING:
    from testkit.sim.member import Member

POLICY = SendPolicy(attempts=5, in_flight_wait_s=60.0)


def reply_parts(
    member: Member, taken: list[int], thread_key: str = "", burst: list[Inbound] | None = None
) -> ReplyParts:
    """The parts of a reply to ``burst`` on ``member``'s lane for ``thread_key``; ``taken``
    (its records' offsets) grows by the newer messages the reply takes in."""
    world = member.world
    sender: MailSender = (
        world.mail
        if world.bugs.no_fence_before_send
        else member.fence.sender(MemberMail(world.mail, member.owns))
    )

    async def dead_letter(record: ReplyRecord, reason: str, burst: Sequence[Inbound]) -> None:
        await world.letters.reply_letter(member, record, reason, burst, taken)

    async def write(messages: Sequence[Inbound]) -> str | Decline | Draft:
        if world.bugs.writer_sees_latest_only:
            messages = messages[-1:]
        written = await member.writer.write(messages)
        return written if member.parts is None else by_mode("always", written)

    loop = asyncio.get_running_loop()
    return ReplyParts(
        ledger=member.ledger,
        sender=sender,
        write=write,
        dead_letter=dead_letter,
        now=world.now,
        policy=POLICY,
        newer=functools.partial(_newer, member, thread_key, taken, burst),
        may_retry=member.owns,
        arbitrate=member.ledger.arbitrate,
        unsettled=member.late_sends.failed,
        monotonic=loop.time,
        replay=world.letters.replayed(taken),
    )


async def _newer(
    member: Member, thread_key: str, taken: list[int], burst: list[Inbound] | None
) -> Sequence[Inbound]:
    """The thread's newer messages a reply takes in (``Conversation.process``'s ``newer``):
    held ones (window 0), or those queued on its lane."""
    world = member.world
    holding, lane = member.holding, member.lanes.get(thread_key)
    more: Sequence[tuple[int, Item]]
    if holding is not None:  # held: what else of the thread is (window 0)
        more = holding.newer(thread_key.encode(), world.operator is not None)
    elif lane is None or not lane.queue:
        return ()
    else:
        more, lane.queue = messages_of(lane.queue)
    admitted = await world.letters.admit(member, more)
    # as the worker (conversation.act): a newer message the ledger has (a retried
    # one's failed reply, a killed worker's pending one) is not taken into this
    # reply, nor dropped: it is answered after it
    recorded = {o for o, m in admitted if member.ledger.get(m.key) is not None}
    # nor, with approval on, a replayed one: its key may end a chain of drafts
    # covered by it, which only its own burst recalls (F15; held: not taken)
    if world.operator is not None:
        recorded |= {o for o, _ in admitted if world.letters.replayed([o])}
    if holding is not None:
        holding.leave(thread_key.encode(), sorted(recorded))
    elif lane is not None:
        lane.queue = [pair for pair in more if pair[0] in recorded] + lane.queue
    taken.extend(offset for offset, _ in more if offset not in recorded)
    joined = distinct(m for offset, m in admitted if offset not in recorded)
    if burst is not None:  # a try after a failure answers them too
        burst.extend(joined)
    return joined


def messages_of(
    queue: list[tuple[int, Item | Release]],
) -> tuple[list[tuple[int, Inbound | Resent]], list[tuple[int, Item | Release]]]:
    """The queue's messages before its first decision or release, and the rest (each is a
    job of its own, in the thread's order)."""
    jobs = (ApprovalDecision, Release)
    cut = next((i for i, (_, m) in enumerate(queue) if isinstance(m, jobs)), None)
    if cut is None:
        return queue, []  # type: ignore[return-value]
    return queue[:cut], queue[cut:]  # type: ignore[return-value]

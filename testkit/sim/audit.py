"""A member's ledger audit timer, as the worker's (``lifecycle._wire_ledger_audit``), and
its take-overs, as the worker's (``TableLedger.take_overs``: the last compaction lag of
the partition read, each a round trip to the broker)."""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from onceonly.processors.exceptions import BrokerUnavailable, Rebalancing
from onceonly.processors.reply.take_over import TakeOvers
from testkit.sim.io import KAFKA, Killed, current, remote
from testkit.sim.log import AUDIT_LATENCY_S, AUDIT_S, COMPACTION_LAG_S

if TYPE_CHECKING:
    from testkit.sim.member import Member


def take_overs(member: Member) -> TakeOvers:
    """The member's take-overs of the ledger partition: once per assignment, by its first
    audit or a recovered record's send, whichever comes first (findings F29, F38)."""
    world = member.world

    def bounds() -> tuple[int, int]:
        """The offsets of the ledger partition that landed within the compaction lag (the
        worker asks the broker for the offset at that time), and its log end."""
        part = world.part
        since = world.loop.time() - COMPACTION_LAG_S
        return bisect_left(part.landed_at, since), len(part.changelog)

    async def tail(partition: int) -> tuple[int, int]:
        return await remote(AUDIT_LATENCY_S, world.broker.when_up(bounds), AUDIT_LATENCY_S, KAFKA)

    async def read_tail(
        partition: int, first: int, last: int
    ) -> Sequence[tuple[int, bytes, bytes | None]]:
        def read() -> list[tuple[int, bytes, bytes | None]]:
            return world.part.entries(first, last)

        return await remote(AUDIT_LATENCY_S, world.broker.when_up(read), AUDIT_LATENCY_S, KAFKA)

    async def take(partition: int, first: int, end: int) -> None:
        await member.ledger.take_over(partition, first, end, read_tail)

    return TakeOvers(tail, take)


async def audits(member: Member) -> None:
    """Every AUDIT_S, while the member owns the partition, its ledger reads what other
    writers landed there and settles again a key a late record left unsettled
    (TableLedger.audit; the simulator's finding F19), after the partition's take-over if
    no recovered send has done it since the assignment (F29). A write of it the broker
    failed crashes the worker, as faust's timer crashes the app."""
    current.set(member)
    world = member.world

    def log_end() -> int:
        return len(world.part.changelog)

    try:
        while not member.dead:
            await asyncio.sleep(AUDIT_S)
            if not member.owns() or member.paused:
                continue
            try:
                await member.ledger.take_overs.once(0)
            except Rebalancing:  # its repair fenced: the partition moved meanwhile
                world.trace(member.name, "ledger take-over stood down: fenced")
                continue
            end = await remote(
                AUDIT_LATENCY_S, world.broker.when_up(log_end), AUDIT_LATENCY_S, KAFKA
            )
            if member.owns() and await member.ledger.audit(0, end):
                member.audited = end
            await member.late_sends.check(member.ledger, lambda partition: member.owns())
    except Killed:
        pass
    except BrokerUnavailable as exc:
        member.fatal(exc)
    except Exception as exc:  # faust's timer would crash the worker: a finding
        world.errors.append(f"{member.name}'s audit: {exc!r}")
        world.trace(member.name, f"audit raised {exc!r}")

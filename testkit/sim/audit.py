"""A member's ledger audit timer, as the worker's (``lifecycle._wire_ledger_audit``)."""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from onceonly.processors.exceptions import BrokerUnavailable
from testkit.sim.io import Killed, current, remote
from testkit.sim.log import AUDIT_LATENCY_S, AUDIT_S, COMPACTION_LAG_S

if TYPE_CHECKING:
    from testkit.sim.member import Member


async def audits(member: Member) -> None:
    """Every AUDIT_S, while the member owns the partition, its ledger reads what other
    writers landed there and settles again a key a late record left unsettled
    (TableLedger.audit; the simulator's finding F19); the first audit after an assignment
    first reads the records of the last compaction lag (TableLedger.take_over, F29). A
    write of it the broker failed crashes the worker, as faust's timer crashes the app."""
    current.set(member)
    world = member.world

    def log_end() -> int:
        return len(world.part.changelog)

    def tail() -> tuple[int, int]:
        """The offsets of the ledger partition that landed within the compaction lag (the
        worker asks the broker for the offset at that time), and its log end."""
        part = world.part
        since = world.loop.time() - COMPACTION_LAG_S
        return bisect_left(part.landed_at, since), len(part.changelog)

    async def read_tail(
        partition: int, first: int, last: int
    ) -> Sequence[tuple[int, bytes, bytes | None]]:
        def read() -> list[tuple[int, bytes, bytes | None]]:
            return world.part.entries(first, last)

        return await remote(AUDIT_LATENCY_S, world.broker.when_up(read), AUDIT_LATENCY_S)

    try:
        while not member.dead:
            await asyncio.sleep(AUDIT_S)
            if not member.owns() or member.paused:
                continue
            if member.taken != member.generation:  # the first audit since an assignment
                first, end = await remote(
                    AUDIT_LATENCY_S, world.broker.when_up(tail), AUDIT_LATENCY_S
                )
                taking = member.generation
                if member.owns() and await member.ledger.take_over(0, first, end, read_tail):
                    member.taken = taking
            end = await remote(AUDIT_LATENCY_S, world.broker.when_up(log_end), AUDIT_LATENCY_S)
            if member.owns() and await member.ledger.audit(0, end):
                member.audited = end
    except Killed:
        pass
    except BrokerUnavailable as exc:
        member.fatal(exc)

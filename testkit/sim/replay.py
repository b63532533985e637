"""The operator's ``onceonly replay``: a range of the deliveries partition produced again.

As :func:`onceonly.operations.replay.replay` does it: every record from an offset to the
partition's end is copied, with its headers (a webhook's envelope and its MAC, a decision
as it was) and the ``onceonly-replay`` header; the group's offsets do not move and the
workers keep running, so a copy may meet its event claimed, answered, held or still being
answered. A replayed webhook is a :class:`~testkit.sim.letters.Resent` with ``replay`` set
(the worker's dedupe lets a *failed* event through again and skips a succeeded one, the
ledger stops anything already sent); a record without a valid MAC stays without one; a
decision is applied again (a repeat). Half the schedules draw 1-2 ``replay`` events, from
a generator of their own (``schedule._replays``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceonly.processors.writer.contract import Inbound
from onceonly.schemas.dead_letter import Resend
from onceonly.schemas.envelope import mac_of
from testkit.sim.letters import KEY, Item, Resent

if TYPE_CHECKING:
    from testkit.sim.world import World


def replayed(world: World, item: Item) -> Item:
    """The copy a replay produces of the record ``item``."""
    if isinstance(item, Inbound):
        envelope = world.letters.envelope(item)
        return Resent(Resend(envelope, mac_of(envelope.encode(), KEY)), replay=True)
    if isinstance(item, Resent):
        return Resent(item.resend, replay=True)
    return item  # a decision on a draft, copied as it was


def replay(world: World, fraction: float) -> None:
    """``onceonly replay --from-offset`` at ``fraction`` of the partition's records so far."""
    deliveries = world.part.deliveries
    first = int(fraction * len(deliveries))
    copies = [replayed(world, item) for item in deliveries[first:]]
    world.trace("operator", f"replay from offset {first}: {len(copies)} records copied")
    for copy in copies:
        world.deliver(copy)

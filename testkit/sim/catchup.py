"""The operator's catch-up in the simulated world (``onceonly catch-up``), racing the
webhooks, the workers and the dead-letter retries, and the webhooks it exists for: lost.

In a schedule that lost webhooks, a ``catch_up`` event runs the product's own
:func:`~onceonly.operations.catchup.catch_up` for each inbox of the schedule: the mail
API's listing (SimMail's messages, each received one with the fields AgentMail's listing
gives, as its webhook carries them; the agent's own emails as they are) through
:class:`~onceonly.processors.mail.agentmail.channel.AgentMailChannel`'s ``missed``, compared
by reply key with :class:`~onceonly.operations.answered.Answered` read from the ledger
partition as the topic holds it (what compaction left), and each unanswered message fed to
the deliveries partition as the product's ``Feeder`` produces it: its envelope with its MAC
under the workers' secret, with the catch-up's own event id, not a replay. The listing takes
virtual time (a page's latency per message), so the workers answer, and the ledger moves,
while it lists.

Lost webhooks: a schedule drawn with them (half, from this module's generator) has 1-3
messages that reach the inbox and whose webhook never comes. After the schedule's last event
the operator runs catch-up once more in those (as after an outage), so every message is
answered in the end or the checker says which is not.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from onceonly.operations.answered import Answered
from onceonly.operations.catchup import catch_up
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.schemas.dead_letter import Resend
from onceonly.schemas.envelope import Envelope, mac_of
from testkit.sim.letters import KEY, Resent, envelope_of
from testkit.sim.schedule import EPOCH

if TYPE_CHECKING:
    from testkit.sim.world import World

#: how long listing one message takes (virtual seconds, drawn from the catch-up's generator)
LIST_LATENCY_S = (0.01, 0.2)


class ListedMail:
    """SimMail as catch-up's mail client lists an inbox (``messages_since``)."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng

    async def messages_since(self, account: str, since: datetime) -> AsyncIterator[dict[str, Any]]:
        listed = [m async for m in self.world.mail.messages_since(account, since)]
        for message in listed:
            await asyncio.sleep(self.rng.uniform(*LIST_LATENCY_S))
            inbound = self.world.letters.message(account, str(message["message_id"]))
            if inbound is None:  # the agent's own email
                yield {**message, "from": account}
            else:
                yield json.loads(envelope_of(inbound).raw)["message"]

    async def address(self, account: str) -> str | None:
        return account

    async def aclose(self) -> None:
        return None


class CatchUps:
    """The operator's catch-ups of one world."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.tasks: list[asyncio.Task[None]] = []
        self.finished = False  #: the catch-up after the last event has run

    def play(self) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(self._run()))

    def running(self) -> bool:
        return any(not task.done() for task in self.tasks)

    def final(self) -> None:
        """The catch-up after the schedule's last event (once), in a schedule that lost
        webhooks (in the others, a message a worker lost stays unanswered, and the checker
        says so: a planted ``commit-before-done`` is caught, not healed)."""
        if not self.finished:
            self.finished = True
            if self.world.schedule.lost:
                self.play()

    async def _run(self) -> None:
        world = self.world
        part = world.part
        answered = Answered()
        for _, key, value in part.entries():  # the ledger topic, as compaction left it
            answered.add(key.decode(), None if value is None else part.record(value))
        provider = AgentMailChannel(ListedMail(world, self.rng))  # type: ignore[arg-type]

        def feed(envelope: Envelope) -> None:
            resend = Resend(envelope, mac_of(envelope.encode(), KEY))
            world.deliver(Resent(resend, replay=False))

        for account in sorted({m.inbox_id for m in world.schedule.messages}):
            summary = await catch_up(provider, account, EPOCH, answered=answered, feed=feed)
            world.trace(
                "operator",
                f"catch-up of {account}: {summary.found} listed, {len(summary.fed)} fed, "
                f"{summary.skipped_answered} answered, {summary.skipped_sent_by_agent} own",
            )
